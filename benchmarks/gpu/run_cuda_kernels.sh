#!/usr/bin/env bash
# The CUDA backend's per-op table and step model (benchmarks/gpu/bench_cuda_kernels.cpp) at GPT-2 124M (B 16)
# and 774M (B 8), T 1024, with trident's measured bf16 step at the same shapes on the same GPU, in one call
# of the GPU machine:
#   LOG_DIR=$OUT bash benchmarks/gpu/run_cuda_kernels.sh
# From the checkout root with .device-deps carried (benchmarks/gpu/stage_device_deps.sh). Builds only
# bench_cuda_kernels and trident in build-cuda-device (BUILD_DIR), configured as .device-deps/device-build.sh
# configures it. Writes LOG_DIR/cuda-kernels-S.txt (the console table and the step model) and .json
# (Google Benchmark's), trident-S.log and .jsonl, build logs, device.txt and phases.txt (each phase's exit
# status and seconds). SHAPES (default "124m 774m"), ITERATIONS (timed iterations per op, default 50),
# STEP=0 leaves out the trident runs.
# Estimates (no run yet): configure 10 s, build 60-90 s on 16 cores, 124m 60 s, 774m 90 s, each trident
# run 30 s: about 5 minutes.
set -u
logs=${LOG_DIR:?LOG_DIR: a folder whose files come back}
build=${BUILD_DIR:-build-cuda-device}
iterations=${ITERATIONS:-50}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$logs"
: >"$logs/phases.txt"
start=$SECONDS

# phase NAME LIMIT OUTPUT COMMAND...: COMMAND under `timeout`, its stdout and stderr into OUTPUT; says (and
# appends to phases.txt) NAME, its exit status and seconds.
phase() {
  local name=$1 lim=$2 out=$3 t0=$SECONDS rc=0
  shift 3
  timeout -k 5 "$lim" "$@" >"$out" 2>&1 || rc=$?
  echo "run_cuda_kernels: $name rc=$rc in $((SECONDS - t0)) s ($((SECONDS - start)) s so far)" | tee -a "$logs/phases.txt"
  return $rc
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$logs/device.txt"
echo "commit $(git log -1 --format='%h' 2>/dev/null || echo unknown)" >>"$logs/device.txt"
# shellcheck source=/dev/null
source .device-deps/device-env.sh >/dev/null || { echo "run_cuda_kernels: .device-deps/device-env.sh failed"; exit 1; }
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
# shellcheck disable=SC2086
phase configure 120 "$logs/configure.log" cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DTRIDENT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 $TRIDENT_DEVICE_CMAKE_ARGS || { tail -30 "$logs/configure.log"; exit 1; }
targets=(bench_cuda_kernels)
[ "${STEP:-1}" = 0 ] || targets+=(trident)
phase build 360 "$logs/build.log" cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" \
  || { grep -E -B2 -A8 "error|Error" "$logs/build.log" | head -60; exit 1; }

# name layers hidden heads batch
for s in ${SHAPES:-124m 774m}; do
  case $s in
    124m) L=12 C=768 NH=12 B=16 ;;
    774m) L=36 C=1280 NH=20 B=8 ;;
    *) echo "run_cuda_kernels: SHAPES takes 124m and 774m, not $s"; continue ;;
  esac
  phase "kernels-$s" 240 "$logs/cuda-kernels-$s.txt" "$build/benchmarks/gpu/bench_cuda_kernels" --shape="$s" \
    --iterations="$iterations" --benchmark_out="$logs/cuda-kernels-$s.json" \
    --benchmark_out_format=json
  sed -n '/^Step model/,$p' "$logs/cuda-kernels-$s.txt"
  [ "${STEP:-1}" = 0 ] && continue
  phase "trident-$s" 150 "$logs/trident-$s.log" "$build/trident" train "$here/../model/gpt2-124m-bench.toml" \
    --set model.seq_len=1024 --set model.layers="$L" --set model.hidden="$C" --set model.heads="$NH" \
    --set train.micro_batch="$B" --set train.global_batch="$B" --set train.steps=12 --set train.precision=bf16 \
    --set runtime.backend=cuda --set runtime.log_every=1 --set runtime.metrics="$logs/trident-$s.jsonl"
  python3 - "$logs/trident-$s.jsonl" "$s" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ms = [r["step_ms"] for r in rows if "step_ms" in r and r.get("step", 0) >= 3]
if ms:
    print(f"run_cuda_kernels: trident {sys.argv[2]} bf16 measured step: median {statistics.median(ms):.1f} ms "
          f"over steps 3..{rows[-1]['step']}")
PY
done
echo "run_cuda_kernels: done in $((SECONDS - start)) s"
