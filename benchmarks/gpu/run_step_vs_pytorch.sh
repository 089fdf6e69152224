#!/usr/bin/env bash
# trident's GPU training step against PyTorch on the same GPU, in the same run (GPT-2 shapes, seq 1024).
#   benchmarks/gpu/run_step_vs_pytorch.sh BUILD_DIR [PRECISION] [SHAPES...]
# PRECISION: fp32 (default; TF32 off in PyTorch too). MATMUL (environment): trident's
# train.matmul_precision, fp32 (default), tf32 or bf16, run against PyTorch's float32 matmul precision
# highest, high or medium. COMPILE=0 leaves out torch.compile. SHAPES: "layers:hidden:heads:batch" (default
# 12:768:12:8, GPT-2 124M). trident: median step_ms of steps 3..STEPS from its metrics file; PyTorch:
# benchmarks/gpu/pytorch_gpu_step.py eager and torch.compile, median of 20 steps. Needs `python3` with
# torch (on the GPU machine: the PyTorch venv's). Prints one RESULT line per system and shape.
set -euo pipefail
build=${1:?usage: run_step_vs_pytorch.sh BUILD_DIR [PRECISION] [SHAPES...]}
precision=${2:-fp32}
shift $(( $# >= 2 ? 2 : 1 ))
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(12:768:12:8)
here=$(cd "$(dirname "$0")" && pwd)
steps=${STEPS:-12}
matmul=${MATMUL:-fp32}
case "$matmul" in fp32) torch_matmul=highest ;; tf32) torch_matmul=high ;; bf16) torch_matmul=medium ;;
  *) echo "MATMUL must be fp32, tf32 or bf16" >&2; exit 2 ;; esac
modes=("")
[ "${COMPILE:-1}" = 0 ] || modes+=(--compile)
tmp=$(mktemp -d)
for shape in "${shapes[@]}"; do
  IFS=: read -r L C NH B <<<"$shape"
  "$build/trident" train "$here/../model/gpt2-124m-bench.toml" --set model.seq_len=1024 --set model.layers="$L" \
    --set model.hidden="$C" --set model.heads="$NH" --set train.micro_batch="$B" --set train.global_batch="$B" \
    --set train.steps="$steps" --set train.precision="$precision" --set train.matmul_precision="$matmul" \
    --set runtime.backend=cuda \
    --set runtime.log_every=100 --set runtime.metrics="$tmp/m.jsonl" >"$tmp/trident.log" 2>&1 \
    || { cat "$tmp/trident.log"; exit 1; }
  python3 - "$tmp/m.jsonl" "$L" "$C" "$B" "$precision" "$matmul" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ms = statistics.median(r["step_ms"] for r in rows if r["step"] >= 3)
B = int(sys.argv[4])
print("RESULT " + json.dumps({"system": "trident", "precision": sys.argv[5], "matmul_precision": sys.argv[6],
      "layers": int(sys.argv[2]),
      "hidden": int(sys.argv[3]), "batch": B, "seq": 1024, "ms_per_step": round(ms, 2),
      "tokens_per_s": round(B * 1024 / (ms / 1e3)), "mfu": round(rows[-1]["mfu"], 4),
      "peak_mem_gib": round(rows[-1]["backend_memory_gib"], 2), "loss_last": rows[-1]["loss"]}))
PY
  for mode in "${modes[@]}"; do
    python3 "$here/pytorch_gpu_step.py" --layers "$L" --hidden "$C" --heads "$NH" --batch "$B" \
      --precision "$precision" --matmul-precision "$torch_matmul" $mode | grep RESULT
  done
done
rm -rf "$tmp"
