#!/usr/bin/env bash
# Everything #26 needs from a lent GPU, in one call of the GPU machine (about 15 minutes of device time a
# session, one 600 s command):
#   LOG_DIR=$OUT bash benchmarks/gpu/run_device_session.sh          (carry [".device-deps"])
# Staged here first, from the checkout root:
#   bash benchmarks/gpu/stage_device_deps.sh     trident's Debian 12 packages (.device-deps)
#   bash benchmarks/gpu/stage_llmc.sh            llm.c's sources for the comparison
#   bash benchmarks/gpu/stage_autocast.sh BUILD  the accuracy run's token shard (optional)
# Phases, each under its own limit so that a hang leaves the others' results:
#   compare   benchmarks/gpu/compare_bf16.sh with DEVICE_TESTS=gpu: the build, `ctest -L gpu`, then
#             trident, llm.c and PyTorch at GPT-2 124M and 774M in bf16 (one table, compare_bf16.md),
#             and (OP_PROFILE=1) trident's 124M step with runtime.op_profile: its time per operation
#   attention benchmarks/gpu/pytorch_attention.py: PyTorch's flash attention at the 124M and 774M
#             attention shapes, the reference for the kernels table's attention rows
#   kernels   benchmarks/gpu/run_cuda_kernels.sh at 124M: every CUDA op's time and the step they add up
#             to, to set beside the measured step (the machine has no profiler), and the step's GEMMs
#             beside the same GEMMs in cuBLASLt called directly (heuristic top-1 and best of 8, bf16
#             output, the GELU epilogue)
#   autocast  (when .device-deps/precision/ holds the shard) #26's PyTorch CPU bf16 autocast run with
#             torch's own bf16 GEMMs (AUTOCAST_GEMM=native: a cross-check of the float32-summed GEMMs that
#             judged the criterion on the CPU, benchmarks/README.md), started first, in the background, niced, on AUTOCAST_THREADS (8) of the 16 cores, stopped at
#             the end of the call if not done; its per-step losses come back either way
#             (benchmarks/precision/records/README.md says how they are compared)
# At most 8 files come back from the machine, so LOG_DIR gets session.tgz (every log), summary.txt (each
# phase's status and seconds, and the lines that matter), and the main tables as they are.
# TOTAL_S (default 560) bounds the whole command; COMPARE_S (default 400) the compare phase.
set -u
out=${LOG_DIR:?LOG_DIR: a folder whose files come back}
total=${TOTAL_S:-560}
work=$(mktemp -d "${TMPDIR:-/tmp}/device-session-XXXXXX")
here=$(cd "$(dirname "$0")" && pwd)
summary=$work/summary.txt
start=$SECONDS
say() { echo "run_device_session: $*" | tee -a "$summary"; }
left() { echo $((total - 20 - (SECONDS - start))); }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$work/device.txt" >>"$summary"
echo "commit $(git log -1 --format='%h %s' 2>/dev/null | cut -c1-100)" | tee -a "$summary"

autocast_pid=""
shard=.device-deps/precision/fortunes_train_000000.bin
if [ -f "$shard" ]; then
  SHARD=$shard PYTORCH_ONLY=1 INIT=gpt2 AUTOCAST_GEMM=native KEEP="$work/autocast" TORCH_THREADS=${AUTOCAST_THREADS:-8} \
    PYTHON=${PYTHON:-/opt/torch/.venv/bin/python3} \
    nice -n 19 bash benchmarks/precision/bf16_vs_pytorch_autocast.sh none 300 >"$work/autocast.out" 2>&1 &
  autocast_pid=$!
  say "autocast: started (pid $autocast_pid)"
else
  say "autocast: no $shard (benchmarks/gpu/stage_autocast.sh): not run"
fi

t0=$SECONDS
LOG_DIR="$work/compare" DEVICE_TESTS=gpu OP_PROFILE=1 TOTAL_S=$(( ${COMPARE_S:-400} < $(left) ? ${COMPARE_S:-400} : $(left) )) \
  bash "$here/compare_bf16.sh" >"$work/compare.out" 2>&1
say "compare: rc=$? in $((SECONDS - t0)) s"
grep -E "^compare_bf16:|tests passed|\*\*\*Failed|summary:" "$work/compare.out" >>"$summary"
sed -n '/op profile of rank 0/,/more in the JSON/p' "$work/compare/trident-124M-ops.log" >>"$summary" 2>/dev/null

# PyTorch's flash attention at the comparison's attention shapes (124M: B 16 x 12 heads; 774M: B 8 x 20
# heads; T 1024, head size 64): the same-session reference for the kernels table's attention rows.
t0=$SECONDS
limit=$(left)
if [ "$limit" -gt 60 ]; then
  for shape in "16 12" "8 20"; do
    read -r batch heads <<<"$shape"
    timeout -k 5 40 "${PYTHON:-/opt/torch/.venv/bin/python3}" "$here/pytorch_attention.py" --batch "$batch" \
      --heads "$heads" >>"$work/pytorch-attention.out" 2>&1
    say "pytorch attention B $batch NH $heads: rc=$?"
  done
  grep "^RESULT" "$work/pytorch-attention.out" >>"$summary"
  say "pytorch attention: in $((SECONDS - t0)) s"
else
  say "pytorch attention: not run ($limit s left)"
fi

t0=$SECONDS
limit=$(left)
if [ "$limit" -gt 30 ]; then
  LOG_DIR="$work/kernels" SHAPES=124m STEP=0 ITERATIONS=${ITERATIONS:-20} \
    timeout -k 5 "$limit" bash "$here/run_cuda_kernels.sh" >"$work/kernels.out" 2>&1
  say "kernels: rc=$? in $((SECONDS - t0)) s (limit $limit s)"
  sed -n '/^Step model/,$p' "$work/kernels/cuda-kernels-124m.txt" 2>/dev/null >>"$summary"
else
  say "kernels: not run ($limit s left)"
fi

if [ -n "$autocast_pid" ]; then
  if kill -0 "$autocast_pid" 2>/dev/null; then
    # Its per-step losses so far are already in its KEEP folder (pytorch.jsonl). PyTorch may hold a TERM
    # back for seconds: KILL its process (the script's child); the script ends with it.
    pkill -KILL -P "$autocast_pid" 2>/dev/null
    say "autocast: stopped unfinished"
  fi
  wait "$autocast_pid" 2>/dev/null
  cat "$work/autocast.out" >>"$summary"
  steps=$(grep -c . "$work/autocast/pytorch.jsonl" 2>/dev/null || echo 0)
  say "autocast: $steps of 300 steps logged in $work/autocast"
fi

cp "$work/compare/compare_bf16.md" "$work/kernels/cuda-kernels-124m.txt" "$work/compare/trident-124M-ops.json" \
  "$out"/ 2>/dev/null
cp "$work/autocast/pytorch.jsonl" "$out"/autocast-pytorch.jsonl 2>/dev/null
say "done in $((SECONDS - start)) s"
cp "$summary" "$out"/
tar czf "$out/session.tgz" -C "$work" . 2>/dev/null
