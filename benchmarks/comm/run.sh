#!/bin/sh
# Runs the communication benchmarks (bench_comm) at 2 and 8 ranks with MpiWait Block and Poll and
# prints one table: time per operation and bandwidth for each case, and the poll/block time ratio.
#   benchmarks/comm/run.sh [BUILD_DIR]          (default: build)
# Environment: MIN_TIME (--benchmark_min_time, seconds, no unit suffix in Google Benchmark 1.7.1;
# default 0.05), MAX2 / MAX8 (largest message at 2 / 8 ranks; default 64M / 4M), OUT (folder for the
# JSON results; default a fresh temporary folder), MPIEXEC (default mpiexec).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
bench=$build/benchmarks/comm/bench_comm
[ -x "$bench" ] || { echo "run.sh: $bench not found; build the bench_comm target first" >&2; exit 1; }
min_time=${MIN_TIME:-0.05}
max2=${MAX2:-64M}
max8=${MAX8:-4M}
mpiexec=${MPIEXEC:-mpiexec}
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/trident-bench-comm-XXXXXX")}
mkdir -p "$out"
export OPENBLAS_NUM_THREADS=1

echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for np in 2 8; do
  max=$max2
  [ "$np" = 8 ] && max=$max8
  for wait in block poll; do
    cmd="$mpiexec -n $np $bench --mpi_wait=$wait --max_bytes=$max --benchmark_min_time=$min_time --benchmark_out=$out/np${np}_$wait.json --benchmark_out_format=json"
    echo "\$ $cmd"
    start=$(date +%s)
    $cmd > "$out/np${np}_$wait.txt" 2>&1 || { cat "$out/np${np}_$wait.txt" >&2; exit 1; }
    echo "  ($(($(date +%s) - start)) s)"
  done
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg); JSON in $out"
/usr/bin/python3 "$here/table.py" "$out"
