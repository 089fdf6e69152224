#!/usr/bin/env bash
# Installs the Debian 12 packages that trident's build, tests and reference checks need.
# Idempotent: does nothing (and needs no root) when everything is already present.
set -euo pipefail

packages=(
  cmake make ninja-build ccache g++ pkg-config
  mpich libmpich-dev libhdf5-mpich-dev hdf5-tools libopenblas-dev
  libtrilinos-kokkos-dev libtrilinos-kokkos-kernels-dev
  libtomlplusplus-dev libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev libpcre2-dev
  libboost-context-dev
  python3-torch python3-numpy python3-h5py
)
# Slurm test cluster (ctest label "slurm", tests/slurm/local_cluster.sh) and the run plots (jobs/plot_run.py):
# `make test` asks for them (TRIDENT_WITH_SLURM=1); they are not needed to build.
if [[ "${TRIDENT_WITH_SLURM:-0}" == 1 ]]; then
  packages+=(slurmctld slurmd slurm-client munge python3-matplotlib)
fi

# The tokenizer tests (tests/text): gettext's msgunfmt and iso-codes' translations for the test corpus,
# node for OpenAI's tiktoken, the reference tokenizer (npm, pinned, installed below into TRIDENT_NPM_DIR).
# `make test` asks for them (TRIDENT_WITH_TEXT_TESTS=1); without them those tests fail, saying so.
tiktoken_version=1.0.22
npm_dir=${TRIDENT_NPM_DIR:-$(cd "$(dirname "$0")/.." && pwd)/.cache/npm}
if [[ "${TRIDENT_WITH_TEXT_TESTS:-0}" == 1 ]]; then
  packages+=(gettext iso-codes)
  # Debian's nodejs, unless a node is installed otherwise (e.g. NodeSource's). No npm: tiktoken has no
  # dependencies, so its pinned tarball is fetched and checked below (Debian's npm is ~300 packages).
  command -v node >/dev/null || packages+=(nodejs)
  packages+=(python3)
fi

# tiktoken into $npm_dir/node_modules/tiktoken, unless that version is there already: the registry's
# tarball, checked against the integrity hash the registry publishes for it (needs the registry once).
tiktoken_integrity=sha512-PKvy1rVF1RibfF3JlXBSP0Jrcw2uq3yXdgcEXtKTYn3QJ/cBRBHDnrJ5jHky+MENZ6DIPwNUGWpkVx+7joCpNA==
install_npm_packages() {
  [[ "${TRIDENT_WITH_TEXT_TESTS:-0}" == 1 ]] || return 0
  local installed
  installed=$(node -p "require('$npm_dir/node_modules/tiktoken/package.json').version" 2>/dev/null || true)
  [[ $installed == "$tiktoken_version" ]] && return 0
  echo "install-deps: installing tiktoken@$tiktoken_version (npm registry tarball) into $npm_dir"
  /usr/bin/python3 - "$tiktoken_version" "$tiktoken_integrity" "$npm_dir/node_modules/tiktoken" <<'PY'
import base64, hashlib, io, os, shutil, sys, tarfile, urllib.request
version, integrity, target = sys.argv[1:]
url = f"https://registry.npmjs.org/tiktoken/-/tiktoken-{version}.tgz"
blob = urllib.request.urlopen(url, timeout=120).read()
digest = "sha512-" + base64.b64encode(hashlib.sha512(blob).digest()).decode()
if digest != integrity:
    sys.exit(f"install-deps: {url}: integrity {digest} is not the pinned {integrity}")
shutil.rmtree(target, ignore_errors=True)
os.makedirs(target)
with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
    for m in tar.getmembers():  # npm tarballs hold package/...; nothing may land outside target
        name = m.name.split("/", 1)[1] if "/" in m.name else ""
        if not name or name.startswith("/") or ".." in name.split("/") or not (m.isfile() or m.isdir()):
            continue
        m.name = name
        tar.extract(m, target)
PY
}

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  install_npm_packages
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  if ! command -v sudo >/dev/null; then
    # The Slurm packages are optional: without them the slurm tests skip (they need root anyway).
    if [[ "${TRIDENT_WITH_SLURM:-0}" == 1 ]] && TRIDENT_WITH_SLURM=0 "$0"; then
      echo "install-deps: not root and no sudo: ${missing[*]} not installed (the slurm tests will skip)" >&2
      exit 0
    fi
    echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
# Keep the packages' postinst scripts from starting system munge/slurm services (the tests start their
# own cluster, tests/slurm/local_cluster.sh): a policy-rc.d that refuses, for the install only.
policy=/usr/sbin/policy-rc.d
made_policy=0
if [[ $(id -u) -eq 0 && ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 755 "$policy" && made_policy=1
fi
trap '[[ $made_policy == 1 ]] && rm -f "$policy"' EXIT
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
# Serial HDF5's h5cc would shadow h5pcc in CMake's FindHDF5: refuse to build against it.
if [[ -x /usr/bin/h5cc ]] && dpkg-query -W -f='${Status}' libhdf5-dev 2>/dev/null | grep -q "install ok"; then
  echo "install-deps: warning: libhdf5-dev (serial HDF5) is installed; CMake is pointed at h5pcc explicitly" >&2
fi
install_npm_packages
