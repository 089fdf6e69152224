#!/usr/bin/env bash
# Stage #26's accuracy run for the GPU machine (benchmarks/gpu/run_device_session.sh runs its PyTorch
# side there, a CPU with bf16 instructions being quicker than this one): the fortunes token shard
# (benchmarks/precision/token_stream.sh, STREAM=fortunes; needs Debian's fortunes package and a trident
# build here) into .device-deps/precision/, which `carry` sends with .device-deps. About 1.5 MB.
#   bash benchmarks/gpu/stage_autocast.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$build/trident" ] || { echo "stage_autocast: no $build/trident (make build)" >&2; exit 2; }
mkdir -p .device-deps/precision
grep -qx '/.device-deps/' "$(git rev-parse --git-common-dir)/info/exclude" 2>/dev/null \
  || echo '/.device-deps/' >>"$(git rev-parse --git-common-dir)/info/exclude"
export STREAM=fortunes
# shellcheck source=/dev/null
. "$here/../precision/token_stream.sh"
token_shard=""
prepare_token_stream "$build" .device-deps/precision  # sets token_shard
echo "stage_autocast: $token_shard ($(du -h "$token_shard" | cut -f1))"
