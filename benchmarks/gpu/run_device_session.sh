#!/usr/bin/env bash
# One GPU-machine session in one command: build with the CUDA backend, run `ctest -L gpu`, then the
# training-step benchmarks (GPT-2 124M against PyTorch on the same GPU, and the Llama shape).
#   LOG_DIR=$OUT bash benchmarks/gpu/run_device_session.sh
# Needs .device-deps staged beside the checkout (../shared/notes/gpu/README.md). Every phase has its own
# time limit so that a hang in one still returns the logs of the others. Logs and RESULT lines go to
# LOG_DIR; the exit status is the build-and-test status.
set -u
logs=${LOG_DIR:?LOG_DIR: a folder whose files come back}
build=build-cuda-device
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$logs/device.txt"
git log -1 --format='commit %h %s' 2>/dev/null | tee -a "$logs/device.txt"
timeout "${TEST_LIMIT_S:-330}" env LOG_DIR="$logs" DEVICE_TESTS=gpu \
  bash .device-deps/device-build.sh "$build" -j8 --timeout 240
status=$?
echo "run_device_session: build and ctest -L gpu rc=$status"
[ -x "$build/trident" ] || exit "$status"
# shellcheck source=/dev/null
source .device-deps/device-env.sh >/dev/null
# MATMULS: the train.matmul_precision values to run at fp32 (default fp32); PRECISIONS: further
# train.precision values (bf16: against PyTorch's bf16 autocast); COMPILE=0 leaves out torch.compile.
for matmul in ${MATMULS:-fp32}; do
  MATMUL=$matmul STEPS=12 timeout 200 bash benchmarks/gpu/run_step_vs_pytorch.sh "$build" fp32 12:768:12:8 \
    | tee -a "$logs/step-gpt2.txt"
done
for precision in ${PRECISIONS:-}; do
  STEPS=12 timeout 200 bash benchmarks/gpu/run_step_vs_pytorch.sh "$build" "$precision" 12:768:12:8 \
    | tee -a "$logs/step-gpt2.txt"
done
timeout 90 "$build/trident" train benchmarks/model/llama-124m-bench.toml --set model.seq_len=1024 \
  --set train.micro_batch=8 --set train.global_batch=8 --set runtime.backend=cuda \
  --set train.matmul_precision="${LLAMA_MATMUL:-fp32}" \
  --set runtime.log_every=4 --set runtime.metrics="$logs/step-llama.jsonl" >"$logs/step-llama.log" 2>&1
echo "run_device_session: llama step rc=$? (log: $logs/step-llama.log)"
tail -3 "$logs/step-llama.log"
exit "$status"
