#!/bin/sh
# Checkpoint bandwidth of GPT-2 124M (parameters + AdamW moments, 1.49 GB) at 1, 2, 4 and 8 ranks
# (tp = ranks), against dd on the same disk.
#   benchmarks/checkpoint/run.sh [BUILD_DIR] [DIR]     (defaults: build, a fresh folder in $TMPDIR)
# Environment: RANKS (default "1 2 4 8"), REPS (default 1), IO (collective | independent; default both),
# MPIEXEC (default mpiexec).
set -eu
build=${1:-build}
bench=$build/benchmarks/checkpoint/bench_checkpoint
[ -x "$bench" ] || { echo "run.sh: $bench not found; build the bench_checkpoint target first" >&2; exit 1; }
dir=${2:-$(mktemp -d "${TMPDIR:-/tmp}/trident-bench-ckpt-XXXXXX")}
mkdir -p "$dir"
mpiexec=${MPIEXEC:-mpiexec}
export OPENBLAS_NUM_THREADS=1

echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# disk: $(df -h "$dir" | tail -1)"
echo "\$ dd if=/dev/zero of=$dir/dd.bin bs=1M count=1024 conv=fsync"
dd if=/dev/zero of="$dir/dd.bin" bs=1M count=1024 conv=fsync 2>&1 | tail -1
echo "\$ dd if=$dir/dd.bin of=/dev/null bs=1M iflag=direct"
dd if="$dir/dd.bin" of=/dev/null bs=1M iflag=direct 2>&1 | tail -1
rm -f "$dir/dd.bin"
for io in ${IO:-collective independent}; do
  for np in ${RANKS:-1 2 4 8}; do
    echo "\$ $mpiexec -n $np $bench $dir/np$np ${REPS:-1} $io"
    $mpiexec -n "$np" "$bench" "$dir/np$np" "${REPS:-1}" "$io" 2>&1 |
      sed -n -e 's/.*checkpoint: \(wrote\|loaded\) .*\(rank 0: [^)]*\))$/  \1, \2/p;t' -e '/^[^[]/p'
    rm -rf "$dir/np$np"
  done
done
