#!/usr/bin/env bash
# Every benchmark of the project, in turn (`make bench` runs this on its build folder):
#   1. kernel benchmarks       BUILD_DIR/benchmarks/kernels/bench_kernels --benchmark_min_time=0.05
#   2. training step vs PyTorch benchmarks/model/run_step_comparison.sh BUILD_DIR
#   3. tensor parallelism      benchmarks/model/run_tp_comparison.sh BUILD_DIR
#   4. communication           benchmarks/comm/run.sh BUILD_DIR (when that script exists)
#   5. GPT-2 tokenizer          benchmarks/text/run.sh BUILD_DIR (against tiktoken, npm)
# Results: printed, and the raw outputs kept under OUT (default: a fresh folder benchmark-results-<date>
# in the build folder), one subfolder per part. benchmarks/README.md records the measured numbers.
#
#   benchmarks/run_all.sh BUILD_DIR
#
# Environment: ONLY (space-separated subset of "kernels step tp comm text"; default all), OUT; the
# scripts' own variables (ROUNDS, THREADS, STEPS, MIN_TIME, ...) pass through.
# Takes a long time on a small machine (the step comparison alone ~10-30 minutes on 2 cores).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [[ $# -ne 1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
build=$(cd "$1" 2>/dev/null && pwd) || { echo "run_all.sh: build folder '$1' does not exist; build first (make build)" >&2; exit 1; }
only=${ONLY:-kernels step tp comm text}
out=${OUT:-$build/benchmark-results-$(date -u +%Y%m%dT%H%M%SZ)}
wants() { [[ " $only " == *" $1 "* ]]; }
for part in $only; do
  case $part in kernels | step | tp | comm | text) ;; *) echo "run_all.sh: unknown part '$part' in ONLY (kernels step tp comm text)" >&2; exit 2 ;; esac
done
# Check everything first, so that a missing target does not stop the run half-way through.
missing=()
need() {  # need TARGET PATH: the executable must have been built
  [[ -x $2 ]] || missing+=("$1 ($2)")
}
wants kernels && need bench_kernels "$build/benchmarks/kernels/bench_kernels"
wants step && need bench_step "$build/benchmarks/model/bench_step"
wants tp && need trident "$build/trident"
wants comm && [[ -x $here/comm/run.sh ]] && need bench_comm "$build/benchmarks/comm/bench_comm"
wants text && need bench_tokenizer "$build/benchmarks/text/bench_tokenizer"
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "run_all.sh: not built in $build: ${missing[*]}" >&2
  echo "run_all.sh: build them: cmake --build $build (or: make build BUILD=$build)" >&2
  exit 1
fi
if wants step && ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "run_all.sh: /usr/bin/python3 has no torch (apt-get install python3-torch; or ONLY='kernels tp comm')" >&2
  exit 1
fi
mkdir -p "$out"
section() { echo; echo "==== $* ($(date -u +%H:%M:%SZ), load average $(cut -d' ' -f1-3 /proc/loadavg)) ===="; }

echo "run_all.sh: build $build; results in $out; parts: $only"
if wants kernels; then
  section "kernel benchmarks"
  mkdir -p "$out/kernels"
  OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1} "$build/benchmarks/kernels/bench_kernels" \
    --benchmark_min_time=0.05 --benchmark_out="$out/kernels/bench_kernels.json" --benchmark_out_format=json \
    | tee "$out/kernels/bench_kernels.txt"
fi
if wants step; then
  section "training step: trident vs PyTorch"
  mkdir -p "$out/step"
  OUT="$out/step" "$here/model/run_step_comparison.sh" "$build" | tee "$out/step/summary.md"
fi
if wants tp; then
  section "tensor parallelism: tp 1 vs tp 2"
  mkdir -p "$out/tp"
  OUT="$out/tp" "$here/model/run_tp_comparison.sh" "$build" | tee "$out/tp/summary.md"
fi
if wants comm; then
  if [[ -x $here/comm/run.sh ]]; then
    section "communication benchmarks"
    mkdir -p "$out/comm"
    OUT="$out/comm" "$here/comm/run.sh" "$build" | tee "$out/comm/summary.md"
  else
    echo "run_all.sh: benchmarks/comm/run.sh not present: communication benchmarks skipped"
  fi
fi
if wants text; then
  section "GPT-2 tokenizer: trident vs tiktoken"
  mkdir -p "$out/text"
  "$here/text/run.sh" "$build" | tee "$out/text/summary.md"
fi
echo
echo "run_all.sh: done; raw results in $out (summaries: */summary.md); the recorded numbers are in benchmarks/README.md"
