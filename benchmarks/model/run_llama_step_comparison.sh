#!/usr/bin/env bash
# trident's whole Llama training step (`trident train` of benchmarks/model/llama-124m-bench.toml, per-step
# times from its metrics file) against the PyTorch CPU step of the same Llama shape (pytorch_llama_step.py),
# alternating trident and PyTorch runs (A B A B ...) per thread count so that load changes on a shared
# machine hit both alike; the ratio trident / PyTorch is taken per round and its median reported.
#
# trident's step time: the median of `step_ms` in the metrics JSON lines (runtime.metrics) of the steps
# after the first 2 (the first step allocates activations and scratch; the second is the end of the warm-up),
# and the median process CPU time of the same steps (sampled as each metrics line appears, see cpu_watch).
# PyTorch's: the median of TORCH_STEPS steps after 2 warm-up steps. Both time zero_grad, forward, loss,
# backward, gradient norm + clipping and AdamW.
#
# PyTorch runs in several configurations per round (TORCH_CONFIGS), so that the comparison is against
# PyTorch's best CPU configuration, reported per thread count:
#   loop            AdamW's plain per-parameter loop (torch 1.13's CPU default)
#   foreach         AdamW's multi-tensor path (--foreach)
#   loop-passive    loop with OMP_WAIT_POLICY=PASSIVE (Debian's torch has two pools, GOMP for elementwise
#   foreach-passive ops and OpenBLAS' pthreads for GEMMs; at more than 1 thread GOMP's spinning idle
#                   threads take the core OpenBLAS' worker needs: benchmarks/README.md "## Training step")
#
#   benchmarks/model/run_llama_step_comparison.sh [BUILD_DIR]      (default: build; needs BUILD_DIR/trident)
#
# Environment: THREADS (default "1"), ROUNDS (rounds per thread count, default 3), TORCH_STEPS (timed
# PyTorch steps per run, default 8), TORCH_CONFIGS (default "loop foreach" at 1 thread, "loop-passive
# foreach-passive loop" at more), DECK (default benchmarks/model/llama-124m-bench.toml), OUT (folder for the
# raw outputs; default a fresh temporary folder), PYTHON (default /usr/bin/python3, Debian's, which has
# torch), TABLE_ONLY (1: run nothing, tabulate what is in OUT).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
trident=$build/trident
deck=${DECK:-$here/llama-124m-bench.toml}
python=${PYTHON:-/usr/bin/python3}
threads_list=${THREADS:-1}
rounds=${ROUNDS:-3}
torch_steps=${TORCH_STEPS:-8}
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/trident-llama-step-XXXXXX")}

configs_for() {  # the PyTorch configurations at thread count $1
  if [[ -n ${TORCH_CONFIGS:-} ]]; then echo "$TORCH_CONFIGS"
  elif [[ $1 -gt 1 ]]; then echo "loop-passive foreach-passive loop"
  else echo "loop foreach"; fi
}

if [[ ${TABLE_ONLY:-0} != 1 ]]; then
[[ -x $trident ]] || { echo "run_llama_step_comparison.sh: $trident not found (build the trident target)" >&2; exit 1; }
"$python" -c 'import torch' 2>/dev/null || { echo "run_llama_step_comparison.sh: $python has no torch (apt-get install python3-torch)" >&2; exit 1; }
mkdir -p "$out"

source "$here/run_logged.sh"  # load, run

# Runs trident and records its process CPU time (all threads, /proc/PID/stat) each time a metrics line
# appears (polled every 5 ms), so that the per-step CPU time can be compared with PyTorch's process CPU
# time: on a loaded machine the wall times of single runs swing with other processes, the CPU times much less.
cpu_watch='
import os, subprocess, sys, time
metrics, cpu_out, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
tick = os.sysconf("SC_CLK_TCK")
p = subprocess.Popen(cmd)
seen, rows = 0, []
def cpu_ms():
    f = open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) * 1e3 / tick
while p.poll() is None:
    try:
        n = open(metrics).read().count("\n") if os.path.exists(metrics) else 0
        c = cpu_ms()
    except (OSError, IndexError):
        break
    if n > seen:
        rows.append(f"{n} {c:.0f} {time.time():.3f}")
        seen = n
    time.sleep(0.005)
p.wait()
open(cpu_out, "w").write("\n".join(rows) + "\n")
sys.exit(p.returncode)
'

echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $(nproc) cores, load average $(load)"
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
echo "$threads_list" >"$out/threads"
for t in $threads_list; do
  configs_for "$t" >"$out/configs_t$t"
  for r in $(seq 1 "$rounds"); do
    echo "load $(load)" >"$out/load_t${t}_r${r}.txt"
    rm -f "$out/trident_t${t}_r${r}.jsonl"
    run "$out/trident_t${t}_r${r}.txt" env OPENBLAS_NUM_THREADS="$t" OMP_NUM_THREADS="$t" "$python" - \
      "$out/trident_t${t}_r${r}.jsonl" "$out/trident_t${t}_r${r}.cpu" "$trident" train "$deck" \
      --set runtime.metrics="$out/trident_t${t}_r${r}.jsonl" <<<"$cpu_watch"
    for c in $(configs_for "$t"); do
      args=()
      envs=(OPENBLAS_NUM_THREADS="$t" OMP_NUM_THREADS="$t")
      [[ $c == foreach* ]] && args+=(--foreach)
      [[ $c == *-passive ]] && envs+=(OMP_WAIT_POLICY=PASSIVE)
      run "$out/torch-${c}_t${t}_r${r}.txt" env "${envs[@]}" "$python" "$here/pytorch_llama_step.py" \
        --threads "$t" --steps "$torch_steps" "${args[@]}"
    done
    echo "load $(load)" >>"$out/load_t${t}_r${r}.txt"
  done
done
echo "# load average after: $(load); raw outputs in $out"
echo
fi

"$python" - "$out" "$rounds" <<'EOF'
import json, re, statistics, sys, os
out, rounds = sys.argv[1], int(sys.argv[2])
threads = open(f"{out}/threads").read().split()

def trident(t, r):
    steps = [json.loads(l) for l in open(f"{out}/trident_t{t}_r{r}.jsonl") if l.strip()]
    timed = [s for s in steps if s["step"] > 2]
    ms = statistics.median(s["step_ms"] for s in timed)
    gflop = steps[-1]["tflops"] * steps[-1]["step_ms"]  # TFLOP/s * ms = GFLOP per step
    cpu = None  # process CPU ms per step: differences of the CPU time sampled as metrics lines appeared
    p = f"{out}/trident_t{t}_r{r}.cpu"
    if os.path.exists(p):
        rows = {int(a): float(b) for a, b, *_ in (l.split() for l in open(p) if l.strip())}
        d = [rows[s] - rows[s - 1] for s in range(3, len(steps) + 1) if s in rows and s - 1 in rows]
        cpu = statistics.median(d) if d else None
    return dict(ms=ms, gflop=gflop, n=len(timed), cpu=cpu)

def torch_result(path):
    for line in open(path):
        if line.startswith("RESULT "):
            return dict(kv.split("=", 1) for kv in line.split()[1:])
    raise SystemExit(f"no RESULT line in {path}")

t0 = threads[0]
log = open(f"{out}/trident_t{t0}_r1.txt").read()
core = re.search(r"\| (\S+) kernels \|", log)
params = re.search(r"model: (\d+) parameters", log)
tr0 = torch_result(f"{out}/torch-{open(f'{out}/configs_t{t0}').read().split()[0]}_t{t0}_r1.txt")
print(f"trident BLAS core: {core.group(1) if core else 'unknown'}; PyTorch BLAS core: {tr0['blas_core']}; "
      f"parameters: trident {params.group(1) if params else '?'}, PyTorch {tr0['params']}")
loads = []
for t in threads:
    for r in range(1, rounds + 1):
        p = f"{out}/load_t{t}_r{r}.txt"
        if os.path.exists(p):
            loads += [float(l.split()[1]) for l in open(p)]
if loads:
    print(f"load average (1 min) at round starts/ends: {min(loads):.2f} - {max(loads):.2f}")
print()
print("| threads | PyTorch configuration | trident step ms | PyTorch step ms "
      "| trident / PyTorch per round (wall) | median ratio (wall) | trident CPU ms | PyTorch CPU ms "
      "| ratio per round (CPU) | median ratio (CPU) | trident GFLOP/s | PyTorch GFLOP/s |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for t in threads:
    tri = [trident(t, r) for r in range(1, rounds + 1)]
    tms = statistics.median(x["ms"] for x in tri)
    gflop = tri[0]["gflop"]
    best = None
    for c in open(f"{out}/configs_t{t}").read().split():
        res = [torch_result(f"{out}/torch-{c}_t{t}_r{r}.txt") for r in range(1, rounds + 1)]
        pms = [float(x["median_ms"]) for x in res]
        ratios = [a["ms"] / b for a, b in zip(tri, pms)]
        pmed = statistics.median(pms)
        pcpu = [float(x["cpu_median_ms"]) for x in res]
        if all(x["cpu"] for x in tri):
            cr = [a["cpu"] / b for a, b in zip(tri, pcpu)]
            tcpu = f"{statistics.median(x['cpu'] for x in tri):.0f}"
            cpu_cols = f"{', '.join(f'{x:.2f}' for x in cr)} | **{statistics.median(cr):.2f}**"
        else:
            tcpu, cpu_cols = "-", "- | -"
        print(f"| {t} | {c} | {tms:.0f} | {pmed:.0f} | {', '.join(f'{x:.2f}' for x in ratios)} "
              f"| **{statistics.median(ratios):.2f}** | {tcpu} | {statistics.median(pcpu):.0f} | {cpu_cols} "
              f"| {gflop / tms * 1e3:.1f} | {gflop / pmed * 1e3:.1f} |")
        if best is None or pmed < best[1]:
            best = (c, pmed)
    print(f"| {t} | fastest PyTorch (wall): {best[0]} | | | | | | | | | | |")
    print()
print(f"ratio < 1: trident faster. trident: median step_ms of steps 3.. of `trident train` "
      f"({tri[0]['n']} steps per run); {gflop:.1f} GFLOP per step (model/flops.hpp).")
EOF
