#!/usr/bin/env bash
# trident's whole training step (bench_step) against the PyTorch CPU step of the same GPT-2 124M-shaped
# model (pytorch_step.py) at 1 and 2 threads, alternating trident and PyTorch runs (A B A B ...) so that
# load changes on a shared machine hit both alike; the ratio is taken per round and its median reported.
# Each trident run also times every GEMM of the step as plain cblas_sgemm (BM_step_gemms_sgemm), so the
# GEMM share of the step is measured in the same process. Then the activation memory per recompute
# mode (GptModel::activation_bytes() and peak RSS, one process per mode) and, with PROFILE=1, the
# per-operation breakdown of the trident step.
# At more than one thread PyTorch runs twice per round: as is, and with OMP_WAIT_POLICY=PASSIVE. Debian's
# torch has two thread pools, its OpenMP (GOMP) pool for elementwise ops and OpenBLAS' pthread pool for
# GEMMs; GOMP's idle threads spin, and on 2 cores they take the core OpenBLAS' worker needs. PASSIVE is
# the fair (tuned) PyTorch figure; both are reported.
#
#   benchmarks/model/run_step_comparison.sh [BUILD_DIR]        (default: build; needs target bench_step)
#
# Environment: THREADS (default "1 2"), ROUNDS (A B pairs per thread count, default 2), STEPS (timed
# trident steps per run, default 5), TORCH_STEPS (timed PyTorch steps per run, default 10),
# PROFILE (1: also run bench_step --profile=3 at each thread count), MEMORY (0: skip the memory
# table), OUT (folder for the raw outputs; default a fresh temporary folder), PYTHON (default
# /usr/bin/python3, Debian's, which has torch), TABLE_ONLY (1: run nothing, tabulate what is in OUT).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
bench=$build/benchmarks/model/bench_step
python=${PYTHON:-/usr/bin/python3}
threads_list=${THREADS:-1 2}
rounds=${ROUNDS:-2}
steps=${STEPS:-5}
torch_steps=${TORCH_STEPS:-10}
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/trident-bench-step-XXXXXX")}

[[ -x $bench ]] || { echo "run_step_comparison.sh: $bench not found; build it: cmake --build $build --target bench_step" >&2; exit 1; }
"$python" -c 'import torch' 2>/dev/null || { echo "run_step_comparison.sh: $python has no torch (apt-get install python3-torch)" >&2; exit 1; }
mkdir -p "$out"

source "$here/run_logged.sh"  # load, run

if [[ ${TABLE_ONLY:-0} != 1 ]]; then
echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $(nproc) cores, load average $(load)"
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
for t in $threads_list; do
  for r in $(seq 1 "$rounds"); do
    run "$out/trident_t${t}_r${r}.txt" env OPENBLAS_NUM_THREADS="$t" OMP_NUM_THREADS="$t" "$bench" \
      --step_iterations="$steps" '--benchmark_filter=BM_train_step|BM_step_gemms_sgemm' \
      --benchmark_out="$out/trident_t${t}_r${r}.json" --benchmark_out_format=json
    run "$out/torch_t${t}_r${r}.txt" env OPENBLAS_NUM_THREADS="$t" OMP_NUM_THREADS="$t" "$python" \
      "$here/pytorch_step.py" --threads "$t" --steps "$torch_steps"
    if [[ $t -gt 1 ]]; then  # PyTorch with its OpenMP pool sleeping instead of spinning (see below)
      run "$out/torchpassive_t${t}_r${r}.txt" env OPENBLAS_NUM_THREADS="$t" OMP_NUM_THREADS="$t" \
        OMP_WAIT_POLICY=PASSIVE "$python" "$here/pytorch_step.py" --threads "$t" --steps "$torch_steps"
    fi
  done
  if [[ ${PROFILE:-0} == 1 ]]; then
    run "$out/profile_t${t}.txt" env OPENBLAS_NUM_THREADS="$t" OMP_NUM_THREADS="$t" "$bench" --profile=3
  fi
done
if [[ ${MEMORY:-1} != 0 ]]; then
  for mode in none selective full; do
    run "$out/memory_$mode.txt" env OPENBLAS_NUM_THREADS=1 "$bench" --activation_report="$mode"
  done
fi
echo "# load average after: $(load); raw outputs in $out"
echo
fi

"$python" - "$out" "$threads_list" "$rounds" <<'EOF'
import json, re, statistics, sys, os
out, threads, rounds = sys.argv[1], sys.argv[2].split(), int(sys.argv[3])

def bench(path, name):
    for b in json.load(open(path))["benchmarks"]:
        if b["name"].split("/")[0] == name:
            return b
    raise SystemExit(f"{name} missing in {path}")

def torch_result(path):
    for line in open(path):
        if line.startswith("RESULT "):
            return dict(kv.split("=", 1) for kv in line.split()[1:])
    raise SystemExit(f"no RESULT line in {path}")

ctx = json.load(open(f"{out}/trident_t{threads[0]}_r1.json"))["context"]
tb = torch_result(f"{out}/torch_t{threads[0]}_r1.txt")
print(f"trident BLAS core: {ctx.get('blas_core')}; PyTorch BLAS core: {tb['blas_core']} (OpenBLAS through libblas.so.3)")
print()
print("| threads | trident step ms | PyTorch step ms | trident / PyTorch (wall) | trident CPU ms | PyTorch CPU ms "
      "| ratio (CPU) | trident GFLOP/s | plain sgemm GFLOP/s | step GEMMs as sgemm ms | GEMM share of step |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
extra = []
for t in threads:
    rows = []
    for r in range(1, rounds + 1):
        js = f"{out}/trident_t{t}_r{r}.json"
        st, sg = bench(js, "BM_train_step"), bench(js, "BM_step_gemms_sgemm")
        tr = torch_result(f"{out}/torch_t{t}_r{r}.txt")
        rows.append(dict(ms=st["median_ms"], cpu=st["cpu_median_ms"], gf=st["GFLOP/s"], sg_ms=sg["median_ms"],
                         sg_gf=sg["GFLOP/s"], tms=float(tr["median_ms"]), tcpu=float(tr["cpu_median_ms"])))
    passive = [f"{out}/torchpassive_t{t}_r{r}.txt" for r in range(1, rounds + 1)]
    have_passive = all(os.path.exists(p) for p in passive)
    if have_passive:
        for x, p in zip(rows, passive):
            x["pms"] = float(torch_result(p)["median_ms"])
    med = lambda k: statistics.median(x[k] for x in rows)
    ratio = statistics.median(x["ms"] / x["tms"] for x in rows)
    ratio_cpu = statistics.median(x["cpu"] / x["tcpu"] for x in rows)
    share = statistics.median(x["sg_ms"] / x["ms"] for x in rows)
    per_round = ", ".join(f"{x['ms'] / x['tms']:.2f}" for x in rows)
    print(f"| {t} | {med('ms'):.0f} | {med('tms'):.0f} | **{ratio:.2f}** (rounds: {per_round}) | {med('cpu'):.0f} | "
          f"{med('tcpu'):.0f} | {ratio_cpu:.2f} | {med('gf'):.1f} | {med('sg_gf'):.1f} | {med('sg_ms'):.0f} | "
          f"{100 * share:.0f}% |")
    if have_passive:
        pr = statistics.median(x["ms"] / x["pms"] for x in rows)
        extra.append(f"| {t} | {med('ms'):.0f} | {med('pms'):.0f} (OMP_WAIT_POLICY=PASSIVE) | **{pr:.2f}** (rounds: "
                     + ", ".join(f"{x['ms'] / x['pms']:.2f}" for x in rows) + ") |")
if extra:
    print()
    print("| threads | trident step ms | PyTorch step ms, OpenMP pool passive | trident / PyTorch (wall) |")
    print("|---|---|---|---|")
    print("\n".join(extra))
print()
print("ratio < 1: trident faster. GEMM share = (the step's GEMMs run as plain cblas_sgemm) / (trident step), same process.")

mem = [f"{out}/memory_{m}.txt" for m in ("none", "selective", "full")]
if all(os.path.exists(p) for p in mem):
    print()
    print("| recompute | activations saved MiB | scratch MiB | total MiB | peak RSS MiB (VmHWM) | RSS after 2 steps MiB (VmRSS) |")
    print("|---|---|---|---|---|---|")
    for p in mem:
        line = next(l for l in open(p) if l.startswith("activation_report"))
        kv = dict(x.split("=", 1) for x in line.split()[1:])
        print(f"| {kv['recompute']} | {float(kv['saved_MiB']):.1f} | {float(kv['scratch_MiB']):.1f} | "
              f"{float(kv['total_MiB']):.1f} | {float(kv['peak_rss_MiB']):.0f} | {kv.get('rss_after_steps_MiB', '-')} |")
EOF
