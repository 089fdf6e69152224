#!/usr/bin/env bash
# trident, llm.c and PyTorch training GPT-2 124M (B 16) and 774M (B 8) at seq 1024 in bf16 on one GPU, in
# one call of the GPU machine, into one table of ms/step and MFU (issue #26):
#   LOG_DIR=$OUT bash benchmarks/gpu/compare_bf16.sh
# From the checkout root, with .device-deps sent along (carry ".device-deps"), staged here first:
#   bash benchmarks/gpu/stage_device_deps.sh     (trident's Debian 12 dependencies; creates .device-deps)
#   bash benchmarks/gpu/stage_llmc.sh            (llm.c's sources at a pinned commit + our CUDA 13 patch)
# Writes LOG_DIR/compare_bf16.md (the table; benchmarks/gpu/compare_table.py) and .json, every raw log
# (trident-S.log/.jsonl, llmc-S.log, pytorch-S.log, build logs), phases.tsv (phase, exit status,
# seconds) and device.txt.
#
# Systems: trident (CUDA, train.precision = "bf16": bf16 GEMM and attention operands, the activations kept
# for backward stored in bf16, a bf16 working copy of fp32 master weights, fp32 gradients; the vocabulary
# padded to 50304 as llm.c and the PyTorch script pad it, trident's default model.vocab_pad_to = 128); llm.c's
# train_gpt2cu (bf16, its own attention, no cuDNN), from random init on random token shards
# (llmc_shards.py); PyTorch (benchmarks/gpu/pytorch_gpu_step.py: torch.compile, flash SDPA only, fused
# AdamW, bf16 autocast over fp32 master weights, gradient clipping as llm.c). Every system runs 32 steps
# (PyTorch: 5 warm-up + 30) and the table takes the median of the last 30.
#
# Time budget, one 600 s call (TOTAL_S, default 540, leaves the machine's start and the transfers
# 60 s): each phase gets min(its limit, what is left of TOTAL_S less 15 s for the table), so a hang in
# one still leaves the others' results. Estimates from ../shared/notes/gpu/README.md and
# benchmarks/README.md (H100; no phase has run yet):
#   phase                         estimate  limit
#   trident build (no tests)         60 s   240 s   unpack 4-13 s, configure 6 s, build 37-53 s
#    with DEVICE_TESTS=gpu                  330 s   + ctest -L gpu -j16 (each test at most 120 s)
#   llm.c build (beside it)          40 s   240 s   one nvcc compile (26 s on the 2-core VM)
#   token shards                      3 s    30 s
#   trident 124M B16                 20 s   100 s   ~225 ms/step (112 ms at B 8) x 32 + start
#   trident 774M B8                  45 s   150 s   ~0.7 s/step x 32 + start and init of 774M
#   trident 124M op profile          15 s   100 s   OP_PROFILE=1 only: 6 steps, each op waited for
#   llm.c 124M B16                   10 s    60 s   ~51 ms/step x 32 + start
#   llm.c 774M B8                    15 s    90 s   ~143 ms/step x 32 + start
#   PyTorch 124M B16                 70 s   150 s   import + torch.compile (~50 s) + 35 x 39 ms
#   PyTorch 774M B8                 110 s   200 s   import + torch.compile (~80 s) + 35 x 112 ms
#   total                          ~330 s
set -u
logs=${LOG_DIR:?LOG_DIR: a folder whose files come back}
total=${TOTAL_S:-540}
build=${BUILD_DIR:-build-cuda-device}
steps=32
here=$(cd "$(dirname "$0")" && pwd)
llmc=.device-deps/llm.c
py=${PYTHON:-/opt/torch/.venv/bin/python3}
[ -x "$py" ] || py=python3
mkdir -p "$logs"
: >"$logs/phases.tsv"
start=$SECONDS

# limit SECONDS: the phase's own limit, cut to what is left of the budget (at least 1 s).
limit() {
  local left=$((total - 15 - (SECONDS - start)))
  [ "$left" -lt "$1" ] && echo $((left > 1 ? left : 1)) || echo "$1"
}
# phase NAME LIMIT OUTPUT COMMAND...: runs COMMAND under `timeout` with its stdout and stderr into the file
# OUTPUT, records NAME, exit status and seconds in phases.tsv and says them.
phase() {
  local name=$1 lim out=$3 t0=$SECONDS rc
  lim=$(limit "$2")
  shift 3
  timeout -k 5 "$lim" "$@" >"$out" 2>&1
  rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" >>"$logs/phases.tsv"
  echo "compare_bf16: $name rc=$rc in $((SECONDS - t0)) s (limit $lim s; $((SECONDS - start)) s so far)"
  return $rc
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$logs/device.txt"
commit=$(git log -1 --format='%h' 2>/dev/null || echo unknown)
echo "commit $commit" >>"$logs/device.txt"

# llm.c builds on one core beside trident's Ninja build.
llmc_ok=0
if [ -f "$llmc/train_gpt2.cu" ]; then
  (phase llmc-build 240 "$logs/llmc-build.out" bash "$here/build_llmc.sh" "$llmc"
   cp "$llmc/build.log" "$logs/llmc-build.log" 2>/dev/null) >"$logs/llmc-build.phase" &
  llmc_build=$!
else
  echo "compare_bf16: $llmc missing: run benchmarks/gpu/stage_llmc.sh here and carry .device-deps" \
    | tee "$logs/llmc-build.out"
  llmc_build=""
fi
trident_ok=0
# DEVICE_TESTS=gpu also runs `ctest -L gpu` after the build (log: ctest-gpu.log), before the benchmarks, so
# that one call of the GPU machine gives both; its verdict is in phases.tsv and does not stop the benchmarks.
tests=${DEVICE_TESTS:-none}
build_limit=240
[ "$tests" = none ] || build_limit=330
if [ -f .device-deps/device-build.sh ]; then
  phase trident-build "$build_limit" "$logs/trident-build.out" \
    env LOG_DIR="$logs" DEVICE_TESTS="$tests" bash .device-deps/device-build.sh "$build" -j16 --timeout 120
  [ -x "$build/trident" ] && trident_ok=1
  grep -E "^device-build:|tests passed|\*\*\*" "$logs/trident-build.out"
else
  echo "compare_bf16: .device-deps/device-build.sh missing: run benchmarks/gpu/stage_device_deps.sh here"
fi
if [ -n "$llmc_build" ]; then
  wait "$llmc_build"
  cat "$logs/llmc-build.out" "$logs/llmc-build.phase"
  [ -x "$llmc/train_gpt2cu" ] && llmc_ok=1
fi

shards=$(mktemp -d "${TMPDIR:-/tmp}/llmc-shards-XXXXXX")
phase shards 30 /dev/null python3 "$here/llmc_shards.py" "$shards"

# name L C NH B
shapes=("124M 12 768 12 16" "774M 36 1280 20 8")
for s in "${shapes[@]}"; do
  read -r name L C NH B <<<"$s"
  [ "$trident_ok" = 1 ] || break
  lim=100
  [ "$name" = 774M ] && lim=150
  # device-env.sh only for trident: its staged libraries stay out of llm.c's and PyTorch's way.
  phase "trident-$name" "$lim" "$logs/trident-$name.log" \
    bash -c 'source .device-deps/device-env.sh >/dev/null && exec "$@"' _ \
    "$build/trident" train "$here/../model/gpt2-124m-bench.toml" --set model.seq_len=1024 \
    --set model.layers="$L" --set model.hidden="$C" --set model.heads="$NH" --set train.micro_batch="$B" \
    --set train.global_batch="$B" --set train.steps="$steps" --set train.precision=bf16 \
    --set runtime.backend=cuda --set data.format=llmc --set data.path="$shards/rand_train_*.bin" \
    --set runtime.log_every=1 --set runtime.metrics="$logs/trident-$name.jsonl"
  grep -E "throughput reference|summary:" "$logs/trident-$name.log"
done
# OP_PROFILE=1: the 124M step once more, 6 steps, with runtime.op_profile (every operation waited for and
# timed: the profile the machine's missing profiler would give), into trident-124M-ops.json and the table
# of its log, trident-124M-ops.log.
if [ "${OP_PROFILE:-0}" = 1 ] && [ "$trident_ok" = 1 ]; then
  phase trident-124M-ops 100 "$logs/trident-124M-ops.log" \
    bash -c 'source .device-deps/device-env.sh >/dev/null && exec "$@"' _ \
    "$build/trident" train "$here/../model/gpt2-124m-bench.toml" --set model.seq_len=1024 \
    --set model.layers=12 --set model.hidden=768 --set model.heads=12 --set train.micro_batch=16 \
    --set train.global_batch=16 --set train.steps=6 --set train.precision=bf16 \
    --set runtime.backend=cuda --set data.format=llmc --set data.path="$shards/rand_train_*.bin" \
    --set runtime.op_profile="$logs/trident-124M-ops.json"
  sed -n '/op profile of rank 0/,/more in the JSON/p' "$logs/trident-124M-ops.log"
fi
for s in "${shapes[@]}"; do
  read -r name L C NH B <<<"$s"
  [ "$llmc_ok" = 1 ] || break
  lim=60
  [ "$name" = 774M ] && lim=90
  phase "llmc-$name" "$lim" "$logs/llmc-$name.log" "$llmc/train_gpt2cu" -i "$shards/rand_train_*.bin" \
    -j "$shards/rand_val_*.bin" -e "d$L" -b "$B" -t 1024 -x "$steps" -v 1000 -m 1 -s 0 -h 0
  grep -E "^step +$steps/" "$logs/llmc-$name.log"
done
for s in "${shapes[@]}"; do
  read -r name L C NH B <<<"$s"
  lim=150
  [ "$name" = 774M ] && lim=200
  phase "pytorch-$name" "$lim" "$logs/pytorch-$name.log" "$py" "$here/pytorch_gpu_step.py" --layers "$L" \
    --hidden "$C" --heads "$NH" --batch "$B" --seq 1024 --precision bf16 --compile --sdpa flash --warmup 5 \
    --steps $((steps - 2))
  grep RESULT "$logs/pytorch-$name.log" | cut -c1-200
done
rm -rf "$shards"
python3 "$here/compare_table.py" "$logs" --commit "commit $commit"
echo "compare_bf16: done in $((SECONDS - start)) s"
