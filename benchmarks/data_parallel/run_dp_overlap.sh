#!/usr/bin/env bash
# Data parallelism at dp = 2 on the GPT-2 124M shape (benchmarks/model/gpt2-124m-bench.toml: seq 64,
# micro-batch 4; here global_batch 8, so one micro-batch per rank per step, 6 steps):
#   overlap   zero 0 with mesh.bucket_mb = 1, 4, 25, each with mesh.overlap_grad_reduce = true and
#             false. The DP wait of a step is the time the rank spent waiting for gradient
#             reductions after backward (metrics "dp_wait_ms"); without overlap that is the whole
#             reduction. Overlap ratio = 1 - wait(overlapped) / wait(after backward): the share of
#             the reduction hidden behind backward. A third variant, "overlapped + progress thread",
#             runs the overlapped case with MPIR_CVAR_ASYNC_PROGRESS=1 (MPICH progresses the
#             non-blocking reductions from a thread instead of only inside trident's MPI_Test calls).
#   zero      zero 0, 1, 2 (bucket 25 MB, overlapped): step time, the app's memory account per rank
#             (metrics "memory_bytes") and the peak RSS of the process.
# Each case runs ROUNDS times in turn (load changes on a shared machine hit every case alike); figures
# are medians over steps 2..N (step 1 is warm-up) and rounds. Rank 0's metrics are used.
#
#   benchmarks/data_parallel/run_dp_overlap.sh [BUILD_DIR]     (default: build; needs target trident)
#
# Environment: ROUNDS (default 2), STEPS (default 6), OUT (folder for logs and metrics; default a
# fresh temporary folder), MPIEXEC (default mpiexec), TABLE_ONLY (1: tabulate what is in OUT).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
trident=$build/trident
deck=$here/../model/gpt2-124m-bench.toml
rounds=${ROUNDS:-2}
steps=${STEPS:-6}
mpiexec=${MPIEXEC:-mpiexec}
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/trident-bench-dp-XXXXXX")}

[[ -x $trident ]] || { echo "run_dp_overlap.sh: $trident not found; build it: cmake --build $build --target trident" >&2; exit 1; }
command -v "$mpiexec" >/dev/null || { echo "run_dp_overlap.sh: $mpiexec not found (apt-get install mpich)" >&2; exit 1; }
mkdir -p "$out"

load() { cut -d' ' -f1-3 /proc/loadavg; }
run() {  # [ENV=...] run NAME EXTRA_SETTINGS...   (ENV: extra environment, e.g. MPIR_CVAR_ASYNC_PROGRESS=1)
  local name=$1
  shift
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  echo "\$ ${ENV:-} $mpiexec -n 2 $trident train $deck --set mesh.dp=2 --set train.global_batch=8 ${sets[*]}"
  local start=$SECONDS
  if ! env OPENBLAS_NUM_THREADS=1 ${ENV:-} "$mpiexec" -n 2 "$trident" train "$deck" --set mesh.dp=2 --set train.global_batch=8 \
      --set "train.steps=$steps" --set "runtime.metrics=\"$out/$name.jsonl\"" "${sets[@]}" >"$out/$name.log" 2>&1; then
    cat "$out/$name.log" >&2
    echo "run_dp_overlap.sh: command failed (output above, also in $out/$name.log)" >&2
    exit 1
  fi
  echo "  ($((SECONDS - start)) s, load average now $(load))"
}

if [[ ${TABLE_ONLY:-0} != 1 ]]; then
  echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $(nproc) cores, load average $(load)"
  for r in $(seq 1 "$rounds"); do
    for mb in 1 4 25; do
      for overlap in true false; do
        run "overlap_${overlap}_b${mb}_r$r" "mesh.bucket_mb=$mb" "mesh.overlap_grad_reduce=$overlap"
      done
      ENV=MPIR_CVAR_ASYNC_PROGRESS=1 run "overlap_async_b${mb}_r$r" "mesh.bucket_mb=$mb"
    done
    for zero in 0 1 2; do run "zero${zero}_r$r" "mesh.zero=$zero"; done
  done
  echo "# load average after: $(load); logs and metrics in $out"
  echo
fi

/usr/bin/python3 - "$out" "$rounds" <<'PY'
import json, re, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])

def steps(name):
    rows = [json.loads(l) for l in open(f"{out}/{name}.jsonl")]
    return [r for r in rows if r["step"] > 1]

def med(name, key):
    return statistics.median(r[key] for rd in range(1, rounds + 1) for r in steps(f"{name}_r{rd}"))

print("Overlap of the DP all-reduce with backward (zero 0, dp 2, 2 ranks x 1 BLAS thread):")
print()
print("| bucket | DP wait after backward (ms) | DP wait overlapped (ms) | overlap ratio | DP wait overlapped + progress thread (ms) | overlap ratio | step ms: after / overlapped / + thread |")
print("|---|---|---|---|---|---|---|")
for mb in (1, 4, 25):
    off, on, th = (med(f"overlap_{v}_b{mb}", "dp_wait_ms") for v in ("false", "true", "async"))
    sm = [med(f"overlap_{v}_b{mb}", "step_ms") for v in ("false", "true", "async")]
    print(f"| {mb} MB | {off:.1f} | {on:.1f} | {1 - on / off:.2f} | {th:.1f} | {1 - th / off:.2f} | "
          f"{sm[0]:.0f} / {sm[1]:.0f} / {sm[2]:.0f} |")

print()
print("ZeRO stages (dp 2, bucket 25 MB, overlapped): per rank, rank 0's account")
print()
print("| zero | step ms | DP wait ms | parameters MiB | gradients MiB | optimizer MiB | activations MiB | buffers MiB | allocated MiB | peak RSS GiB |")
print("|---|---|---|---|---|---|---|---|---|---|")
mib = lambda b: b / 2**20
for z in (0, 1, 2):
    last = steps(f"zero{z}_r1")[-1]
    m = last["memory_bytes"]
    print(f"| {z} | {med(f'zero{z}', 'step_ms'):.0f} | {med(f'zero{z}', 'dp_wait_ms'):.1f} | {mib(m['parameters']):.1f} | "
          f"{mib(m['gradients']):.1f} | {mib(m['optimizer']):.1f} | {mib(m['activations']):.1f} | "
          f"{mib(m['buffers']):.1f} | {mib(m['total'] - m['runtime']):.1f} | {last['memory_gib']:.2f} |")
PY
