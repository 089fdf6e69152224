#!/usr/bin/env bash
# Planner calibration: `trident plan --cluster cpu` predictions against measured step times of the
# same layouts on this machine (GPT-2 124M shape, seq 64, global batch 8, micro-batch 2, 1f1b, zero 0).
# Measured = median step_ms of steps 3..STEPS from the metrics file. One BLAS thread per rank.
# Usage: benchmarks/planner/calibrate.sh [BUILD_DIR] [STEPS]
set -euo pipefail
build=${1:-build}
steps=${2:-6}
trident=$build/trident
[[ -x $trident ]] || { echo "calibrate.sh: $trident not built (make build)" >&2; exit 1; }
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--set model.seq_len=64 --set train.global_batch=8 --set train.micro_batch=2
        --set data.format=text --set data.path=/usr/share/common-licenses/GPL-3 --set 'data.val_path=""' --set data.val_every=0
        --set 'checkpoint.dir=""' --set checkpoint.every_steps=0 --set checkpoint.every_minutes=0)
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '| layout (tp x pp x dp) | ranks | predicted step s | measured step s | measured / predicted |\n|---|---|---|---|---|\n'
for layout in "1 1 1" "2 1 1" "1 2 1" "1 1 2" "2 2 2"; do
  read -r tp pp dp <<<"$layout"
  ranks=$((tp * pp * dp))
  predicted=$("$trident" plan "$root/input/gpt2-124m.toml" --cluster cpu "${common[@]}" --tp $tp --pp $pp --dp $dp \
    --micro-batch 2 --zero 0 --recompute none --schedule 1f1b --virtual-stages 1 --sequence-parallel off --json 2>/dev/null |
    /usr/bin/python3 -c 'import json,sys; print("%.2f" % json.load(sys.stdin)[0]["step_s"])')
  wait_mode=block; [[ $ranks -gt 2 ]] && wait_mode=poll
  OPENBLAS_NUM_THREADS=1 mpiexec -n $ranks "$trident" train "$root/input/gpt2-124m.toml" "${common[@]}" \
    --set train.steps=$steps --set mesh.tp=$tp --set mesh.pp=$pp --set mesh.dp=$dp --set mesh.schedule=1f1b \
    --set runtime.mpi_wait=$wait_mode --set runtime.metrics="$work/m.jsonl" >"$work/log" 2>&1 ||
    { cat "$work/log" >&2; exit 1; }
  measured=$(/usr/bin/python3 -c '
import json, statistics, sys
ms = [json.loads(l)["step_ms"] for l in open(sys.argv[1])][2:]
print("%.2f" % (statistics.median(ms) / 1e3))' "$work/m.jsonl")
  ratio=$(awk -v m="$measured" -v p="$predicted" 'BEGIN{printf "%.2f", m/p}')
  printf '| %s x %s x %s | %s | %s | %s | %s |\n' $tp $pp $dp $ranks "$predicted" "$measured" "$ratio"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
