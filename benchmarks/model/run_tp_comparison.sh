#!/usr/bin/env bash
# Step time of `trident train` on the GPT-2 124M shape (benchmarks/model/gpt2-124m-bench.toml: seq 64,
# batch 4, 6 steps) at tp = 1 and tp = 2, and the share of the step spent in TP communication:
#   tp1/1thr   OPENBLAS_NUM_THREADS=1 mpiexec -n 1 trident train DECK
#   tp1/2thr   OPENBLAS_NUM_THREADS=2 mpiexec -n 1 trident train DECK         (the same 2 cores as tp 2)
#   tp2        OPENBLAS_NUM_THREADS=1 mpiexec -n 2 trident train DECK --set mesh.tp=2
#   tp2+sp     ... --set mesh.tp=2 --set mesh.sequence_parallel=true
# run ROUNDS times in turn (so load changes on a shared machine hit every case alike). Step time: the
# median of the logged steps 2..N (step 1 is warm-up); TP comm: the summary line's "TP comm X% of step
# time" (over all steps, step 1 included, as the summary's ms/step). Then the bytes moved per layer per
# micro-batch: tp 2 runs of 1 step with 1 and with 2 layers; the difference of the summary's "MiB moved
# by this rank" is one layer (one micro-batch per step here).
#
#   benchmarks/model/run_tp_comparison.sh [BUILD_DIR]     (default: build; needs target trident)
#
# Environment: ROUNDS (default 2), STEPS (default: the deck's 6), OUT (folder for the logs; default a
# fresh temporary folder), MPIEXEC (default mpiexec), TABLE_ONLY (1: run nothing, tabulate the logs
# already in OUT).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
trident=$build/trident
deck=$here/gpt2-124m-bench.toml
rounds=${ROUNDS:-2}
mpiexec=${MPIEXEC:-mpiexec}
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/trident-bench-tp-XXXXXX")}
steps_set=()
[[ -n ${STEPS:-} ]] && steps_set=(--set "train.steps=$STEPS")

[[ -x $trident ]] || { echo "run_tp_comparison.sh: $trident not found; build it: cmake --build $build --target trident" >&2; exit 1; }
command -v "$mpiexec" >/dev/null || { echo "run_tp_comparison.sh: $mpiexec not found (apt-get install mpich)" >&2; exit 1; }
mkdir -p "$out"

source "$here/run_logged.sh"  # load, run

if [[ ${TABLE_ONLY:-0} != 1 ]]; then
echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $(nproc) cores, load average $(load)"
for r in $(seq 1 "$rounds"); do
  run "$out/tp1_t1_r$r.log" env OPENBLAS_NUM_THREADS=1 "$mpiexec" -n 1 "$trident" train "$deck" "${steps_set[@]}"
  run "$out/tp2_r$r.log" env OPENBLAS_NUM_THREADS=1 "$mpiexec" -n 2 "$trident" train "$deck" "${steps_set[@]}" \
    --set mesh.tp=2
  run "$out/tp1_t2_r$r.log" env OPENBLAS_NUM_THREADS=2 "$mpiexec" -n 1 "$trident" train "$deck" "${steps_set[@]}"
  run "$out/tp2sp_r$r.log" env OPENBLAS_NUM_THREADS=1 "$mpiexec" -n 2 "$trident" train "$deck" "${steps_set[@]}" \
    --set mesh.tp=2 --set mesh.sequence_parallel=true
done
for sp in false true; do
  for layers in 1 2; do
    run "$out/bytes_sp${sp}_l$layers.log" env OPENBLAS_NUM_THREADS=1 "$mpiexec" -n 2 "$trident" train "$deck" \
      --set mesh.tp=2 --set mesh.sequence_parallel=$sp --set model.layers=$layers --set train.steps=1
  done
done
echo "# load average after: $(load); logs in $out"
echo
fi

/usr/bin/python3 - "$out" "$rounds" <<'EOF'
import re, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
step_re = re.compile(r"step\s+(\d+)/(\d+) \|.*?\| ([0-9.]+) ms \|")
comm_re = re.compile(r"TP comm ([0-9.]+)% of step time \(([0-9.]+) MiB moved by this rank\)")
summary_re = re.compile(r"summary: .*?\| ([0-9.]+) ms/step")

def parse(path):
    steps, comm, mib, summary = {}, None, None, None
    for line in open(path):
        m = step_re.search(line)
        if m:
            steps[int(m.group(1))] = float(m.group(3))  # with 2 ranks both log; the values are per rank
        m = comm_re.search(line)
        if m:
            comm, mib = float(m.group(1)), float(m.group(2))
        m = summary_re.search(line)
        if m:
            summary = float(m.group(1))
    timed = [v for k, v in sorted(steps.items()) if k > 1]
    return (statistics.median(timed) if timed else None), comm, mib, summary

cases = [("tp1_t1", "tp 1, 1 rank x 1 BLAS thread"), ("tp1_t2", "tp 1, 1 rank x 2 BLAS threads"),
         ("tp2", "tp 2, 2 ranks x 1 BLAS thread"), ("tp2sp", "tp 2 + sequence parallel, 2 ranks x 1 thread")]
res = {c: [parse(f"{out}/{c}_r{r}.log") for r in range(1, rounds + 1)] for c, _ in cases}
base = [x[0] for x in res["tp1_t1"]]
print("| case | step ms (median of steps 2+, per round) | median | speed-up vs tp 1 / 1 thread (per-round median) | TP comm % of step | MiB moved per rank (whole run) |")
print("|---|---|---|---|---|---|")
for c, label in cases:
    ms = [x[0] for x in res[c]]
    speed = statistics.median(b / m for b, m in zip(base, ms))
    comm = [x[1] for x in res[c] if x[1] is not None]
    mib = [x[2] for x in res[c] if x[2] is not None]
    print(f"| {label} | {', '.join(f'{m:.0f}' for m in ms)} | {statistics.median(ms):.0f} | {speed:.2f}x | "
          f"{statistics.median(comm):.1f}% ({', '.join(f'{v:.1f}' for v in comm)})" if comm else
          f"| {label} | {', '.join(f'{m:.0f}' for m in ms)} | {statistics.median(ms):.0f} | {speed:.2f}x | -", end="")
    print(f" | {statistics.median(mib):.1f} |" if mib else " | - |")

b, s, h = 4, 64, 768
bsh = b * s * h * 4
print()
print(f"Bytes per layer per micro-batch (b {b}, s {s}, h {h}; b*s*h*4 bytes = {bsh} B = {bsh / 2**20:.2f} MiB):")
for sp in ("false", "true"):
    m1 = parse(f"{out}/bytes_sp{sp}_l1.log")[2]
    m2 = parse(f"{out}/bytes_sp{sp}_l2.log")[2]
    analytic = 4 * bsh if sp == "false" else 10 * bsh
    what = "4 all-reduces of b*s*h fp32" if sp == "false" else "4 reduce-scatters + 6 all-gathers of b*s*h fp32"
    print(f"  sequence_parallel={sp}: counted {m2 - m1:.2f} MiB (2 layers {m2:.1f} MiB - 1 layer {m1:.1f} MiB); "
          f"analytic {what} = {analytic} B = {analytic / 2**20:.2f} MiB")
EOF
