#!/usr/bin/env bash
# Stage trident's Debian 12 dependencies for the GPU machine into .device-deps/: the shared staging
# script (../shared/notes/gpu/stage-device-deps.sh) plus what trident has needed since it was written:
# PCRE2 (src/text/pretokenizer.cpp), whose pkg-config files device-env.sh must point into the unpacked
# tree. Run from the checkout root; then send .device-deps with the checkout (carry) and run
# benchmarks/gpu/run_device_session.sh there.
set -euo pipefail
shared=${SHARED_GPU_NOTES:-../shared/notes/gpu}
bash "$shared/stage-device-deps.sh" .device-deps
(cd .device-deps/debs && apt-get download libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 \
  2>&1 | grep -v unsandboxed || true)
chmod u+w .device-deps/device-env.sh
grep -q 'pkgconfig/\*.pc' .device-deps/device-env.sh || sed -i \
  '/# Prefer the machine.s own copy/i\  sed -i -e "s#^prefix=/usr\\$#prefix=$_dd_p/usr#" "$_dd_p"/usr/lib/$_dd_a/pkgconfig/*.pc 2>/dev/null' \
  .device-deps/device-env.sh
echo "stage_device_deps: $(ls .device-deps/debs/*.deb | wc -l) packages in .device-deps/debs"
