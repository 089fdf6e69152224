#!/bin/sh
# GPU tensor communication on the GPU machine (issue #13): NCCL collectives at one rank (the launch
# floor) with the device->host->device memcpy round trip beside them, then the host-staged MPI transport
# at 2 ranks sharing the GPU (runtime.comm = "mpi"), all in one run on one device.
#   benchmarks/gpu/run_comm.sh [BUILD_DIR]      (default: build; needs the bench_gpu_comm target)
# Environment: MIN_TIME (--benchmark_min_time, seconds; default 0.2), OUT (JSON folder), MPIEXEC.
set -eu
build=${1:-build}
bench=$build/benchmarks/gpu/bench_gpu_comm
[ -x "$bench" ] || { echo "run_comm.sh: $bench not found; build bench_gpu_comm in a CUDA build" >&2; exit 1; }
min_time=${MIN_TIME:-0.2}
mpiexec=${MPIEXEC:-mpiexec}
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/trident-gpu-comm-XXXXXX")}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
for case in "1 nccl" "2 mpi"; do
  set -- $case
  echo "\$ $mpiexec -n $1 $bench --comm=$2"
  $mpiexec -n "$1" "$bench" --comm="$2" --benchmark_min_time="$min_time" \
    --benchmark_out="$out/np$1_$2.json" --benchmark_out_format=json
done
echo "JSON results in $out"
