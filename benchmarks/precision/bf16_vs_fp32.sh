#!/usr/bin/env bash
# #26's acceptance run for bf16 GEMM operands on the CPU: a GPT-2-shaped model (6 layers, hidden 384,
# 6 heads, GPT-2's vocabulary of 50257, seq 256) trained for 300 steps on the same token stream
# (STREAM=licenses, the default, or fortunes: token_stream.sh; windows shuffled, trident's own
# initialisation) with train.precision = fp32 and = bf16 (bf16 GEMM and
# attention operands, activations kept for backward in bf16), the two runs side by side (one BLAS thread
# each); KEY=train.matmul_precision compares bf16 GEMM operands alone instead. Prints the largest relative
# loss difference after step 20, the median step times and the peak RSS; exits 1 if the difference
# passes 2%. lr 6e-4 (GPT-2 small's): at the
# quickstart's 2e-3 with 2 sequences per step the run is chaotic, its loss spikes around step 30, and
# even two fp32 runs that differ only in summation order (serial against tp 2) ended up 2.6% apart at
# some step after step 20 (bf16 against fp32: 7.4%, 120 steps, 2026-11-26).
#   benchmarks/precision/bf16_vs_fp32.sh [BUILD_DIR] [STEPS]
set -euo pipefail
build=${1:-build}
steps=${2:-300}
tmp=$(mktemp -d)
# KEEP=DIR keeps the two runs' metrics and logs there.
trap '[ -n "${KEEP:-}" ] && mkdir -p "$KEEP" && cp "$tmp"/*.jsonl "$tmp"/*.log "$KEEP"/; rm -rf "$tmp"' EXIT
. "$(dirname "$0")/token_stream.sh"
prepare_token_stream "$build" "$tmp" || exit 2
key=${KEY:-train.precision}
for matmul in fp32 bf16; do
  OPENBLAS_NUM_THREADS=1 "$build/trident" train input/quickstart.toml --set model.layers=6 --set model.hidden=384 \
    --set model.heads=6 --set model.seq_len=256 --set train.micro_batch=2 --set train.global_batch=2 \
    --set train.steps="$steps" --set train.warmup_steps=30 --set train.lr=6e-4 --set train.min_lr=6e-5 --set train.sample_every=0 --set data.val_every=0 \
    --set data.path="$token_shard" --set data.val_path="" --set checkpoint.dir="" \
    --set "$key=$matmul" --set runtime.log_every=50 --set runtime.metrics="$tmp/$matmul.jsonl" \
    >"$tmp/$matmul.log" 2>&1 &
done
wait
PRECISION_DIR=$(dirname "$0") python3 - "$tmp/fp32.jsonl" "$tmp/bf16.jsonl" "$tmp/fp32.log" "$tmp/bf16.log" <<'PY'
import json, os, re, statistics, sys
sys.path.insert(0, os.environ["PRECISION_DIR"])
from compare_losses import LIMIT, compare, losses
def rows(p):
    return {r["step"]: r for r in map(json.loads, open(p)) if "loss" in r}
fp32, bf16 = rows(sys.argv[1]), rows(sys.argv[2])
diff = compare(losses(sys.argv[2]), losses(sys.argv[1]), "bf16", "fp32")
ms = lambda r: statistics.median(x["step_ms"] for s, x in r.items() if s > 2)
print(f"median step: fp32 {ms(fp32):.0f} ms, bf16 {ms(bf16):.0f} ms ({ms(bf16) / ms(fp32):.2f}x)")
def rss(log):
    m = re.findall(r"memory of rank 0 .*?activations ([0-9.]+) MiB .*?peak RSS ([0-9.]+) MiB", open(log).read())
    return (float(m[-1][0]), float(m[-1][1])) if m else (float("nan"), float("nan"))
(a32, r32), (a16, r16) = rss(sys.argv[3]), rss(sys.argv[4])
print(f"peak RSS: fp32 {r32:.0f} MiB, bf16 {r16:.0f} MiB ({r16 / r32:.2f}x); activations {a32:.0f} -> {a16:.0f} MiB")
sys.exit(0 if diff <= LIMIT else 1)
PY
