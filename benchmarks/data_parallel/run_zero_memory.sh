#!/usr/bin/env bash
# Memory per rank and step time against the ZeRO stage (0, 1, 2, 3) at dp = 2, 4, 8, on the GPT-2 124M
# shape (benchmarks/model/gpt2-124m-bench.toml: hidden 768, 12 heads, vocabulary 50257, seq 64,
# micro-batch 4) with LAYERS layers (default 6 instead of 12, so that eight zero-0 ranks fit this 24 GiB
# machine beside other work), global_batch 8*dp (two accumulated micro-batches per rank), STEPS steps.
# For each case:
#   measured  the app's memory account of rank 0 after the last step (metrics "memory_bytes": parameters,
#             gradients with ZeRO-2/3 staging, optimizer state, activations) and its peak RSS; step time
#             = median over steps 2..STEPS;
#   planned   `trident plan --cluster cpu --json` pinned to the same layout: the planner's per-device
#             figures (parameters, gradients, optimizer moments, comm buffers = ZeRO-2/3 staging and
#             gathered layers, activations + LM-head extras) and its total without the runtime reserve.
#
#   benchmarks/data_parallel/run_zero_memory.sh [BUILD_DIR]      (default: build; needs target trident)
#
# Environment: LAYERS (6), STEPS (3), DPS ("2 4 8"), ZEROS ("0 1 2 3"), OUT (folder for logs and
# metrics; default a fresh temporary folder), MPIEXEC (mpiexec), TABLE_ONLY (1: tabulate what is in OUT).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
trident=$build/trident
deck=$here/../model/gpt2-124m-bench.toml
layers=${LAYERS:-6}
steps=${STEPS:-3}
dps=${DPS:-2 4 8}
zeros=${ZEROS:-0 1 2 3}
mpiexec=${MPIEXEC:-mpiexec}
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/trident-bench-zero-XXXXXX")}

[[ -x $trident ]] || { echo "run_zero_memory.sh: $trident not found; build it: cmake --build $build --target trident" >&2; exit 1; }
mkdir -p "$out"

if [[ ${TABLE_ONLY:-0} != 1 ]]; then
  echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  for dp in $dps; do
    for zero in $zeros; do
      name=dp${dp}_zero${zero}
      sets=(--set "mesh.dp=$dp" --set "mesh.zero=$zero" --set "train.global_batch=$((8 * dp))"
            --set "model.layers=$layers" --set "train.steps=$steps")
      "$trident" plan "$deck" --cluster cpu --set "model.layers=$layers" --set "train.global_batch=$((8 * dp))" \
        --tp 1 --pp 1 --dp "$dp" --micro-batch 4 --zero "$zero" --recompute none --json >"$out/$name.plan.json"
      echo "\$ OPENBLAS_NUM_THREADS=1 $mpiexec -n $dp $trident train $deck ${sets[*]}"
      start=$SECONDS
      if ! OPENBLAS_NUM_THREADS=1 "$mpiexec" -n "$dp" "$trident" train "$deck" "${sets[@]}" \
          --set "runtime.metrics=\"$out/$name.jsonl\"" >"$out/$name.log" 2>&1; then
        tail -5 "$out/$name.log" >&2
        echo "  failed (output in $out/$name.log)"
        continue
      fi
      echo "  ($((SECONDS - start)) s, load average now $(cut -d' ' -f1-3 /proc/loadavg))"
    done
  done
fi

/usr/bin/python3 - "$out" "$dps" "$zeros" <<'EOF'
import json, re, statistics, sys, os
out, dps, zeros = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
MiB = 1048576.0
def planned(path):
    m = json.load(open(path))[0]["memory"]
    g = lambda k: m[k + "_gb"] * 1e9 / MiB
    return {"parameters": g("parameters"), "gradients": g("gradients"), "optimizer moments": g("optimizer_moments"),
            "comm buffers": g("comm_buffers"), "activations": g("activations"),
            "embedding/LM head": g("edge_activations"),
            "total": sum(v for k, v in m.items() if k.endswith("_gb") and k != "reserved_gb") * 1e9 / MiB}
print("| dp | zero | step ms | vs zero 1 | params MiB meas / plan | grads MiB meas / plan | optimizer MiB meas / plan "
      "| states total MiB meas / plan | activations MiB meas / plan | peak RSS MiB | planner total MiB |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for dp in dps:
    ref = None
    rows = []
    for z in zeros:
        name = f"dp{dp}_zero{z}"
        jl = os.path.join(out, name + ".jsonl")
        if not os.path.exists(jl):
            rows.append((z, None)); continue
        recs = [json.loads(l) for l in open(jl)]
        if not recs:
            rows.append((z, None)); continue
        ms = statistics.median(r["step_ms"] for r in recs[1:]) if len(recs) > 1 else recs[0]["step_ms"]
        if z == "1": ref = ms
        rows.append((z, (recs[-1], ms, planned(os.path.join(out, name + ".plan.json")))))
    for z, data in rows:
        if data is None:
            print(f"| {dp} | {z} | failed | | | | | | | | |"); continue
        rec, ms, p = data
        mem = rec["memory_bytes"]
        mp, mg, mo, ma = (mem[k] / MiB for k in ("parameters", "gradients", "optimizer", "activations"))
        # The planner counts ZeRO-2/3 staging and gathered layers as comm buffers; the app counts them
        # with the gradients and parameters.
        pp_, pg, po, pc = p.get("parameters", 0), p.get("gradients", 0), p.get("optimizer moments", 0), p.get("comm buffers", 0)
        pa = p.get("activations", 0) + p.get("embedding/LM head", 0)
        ratio = f"{ms / ref:.2f}" if ref else ""
        print(f"| {dp} | {z} | {ms:.0f} | {ratio} | {mp:.1f} / {pp_:.1f} | {mg:.1f} / {pg:.1f} | {mo:.1f} / {po:.1f} "
              f"| {mp + mg + mo:.1f} / {pp_ + pg + po + pc:.1f} | {ma:.1f} / {pa:.1f} | {rec['memory_gib'] * 1024:.0f} "
              f"| {p['total']:.0f} |")
EOF
echo "logs and metrics in $out"
