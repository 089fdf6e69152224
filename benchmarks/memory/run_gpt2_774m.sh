#!/usr/bin/env bash
# The GPT-2 774M shape (36 layers, hidden 1280, 20 heads, vocab 50257, seq 64) on 8 ranks of one 24 GiB
# machine: start-up and 3 training steps, then every rank's measured peak RSS by category (the run's own
# "memory of rank" lines) beside the planner's per-rank estimate (`trident check`). Layouts:
#   2x2x2  tp 2 x pp 2 x dp 2, zero 1 (the default): each rank holds 12 bytes per parameter of its quarter
#          of the model (~21 GB free needed)
#   dp8    dp 8, zero 3: each rank holds 16 bytes per parameter of an eighth, plus one gathered layer,
#          the gathered embedding and their gradient staging (~21 GB free needed)
# Usage: benchmarks/memory/run_gpt2_774m.sh [BUILD_DIR] [2x2x2|dp8]
set -euo pipefail
build=${1:-build}
layout=${2:-2x2x2}
trident=$build/trident
[[ -x $trident ]] || { echo "run_gpt2_774m.sh: $trident not built (make build)" >&2; exit 1; }
root=$(cd "$(dirname "$0")/../.." && pwd)
sets=(--set model.layers=36 --set model.hidden=1280 --set model.heads=20 --set model.seq_len=64
      --set mesh.bucket_mb=4 --set runtime.mpi_wait=poll --set runtime.log_every=1
      --set train.steps=3 --set train.micro_batch=1 --set train.warmup_steps=0
      --set data.format=text --set data.path=/usr/share/common-licenses/GPL-3 --set 'data.val_path=""' --set data.val_every=0
      --set 'checkpoint.dir=""' --set checkpoint.every_steps=0 --set checkpoint.every_minutes=0)
case $layout in
  2x2x2) sets+=(--set mesh.tp=2 --set mesh.pp=2 --set mesh.dp=2 --set mesh.zero=1 --set 'mesh.layers_per_stage=[18,18]'
                --set train.global_batch=2) ;;
  dp8) sets+=(--set mesh.dp=8 --set mesh.zero=3 --set train.global_batch=8) ;;
  *) echo "run_gpt2_774m.sh: unknown layout '$layout' (2x2x2 or dp8)" >&2; exit 2 ;;
esac
echo "free memory before: $(awk '/MemAvailable/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
"$trident" check "$root/input/gpt2-124m.toml" --ranks 8 "${sets[@]}" | sed -n '/^Memory per device/,/^train.s memory check/p'
start=$(date +%s)
OPENBLAS_NUM_THREADS=1 mpiexec -n 8 "$trident" train "$root/input/gpt2-124m.toml" "${sets[@]}" 2>&1 |
  grep -E "model:|memory|step [0-9]+/|summary|start-up" | sed 's/^\[[^]]*\] \[info\] //'
echo "wall time: $(( $(date +%s) - start )) s"
