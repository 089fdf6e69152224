#!/usr/bin/env bash
# Pipeline bubble and per-stage activation memory: measured with the trident binary on a small GPT
# (8 layers, hidden 256, seq 64, byte vocabulary), at pp = 2 (one rank per core on a 2-core machine)
# for m = 4, 8, 16 micro-batches, against the analytic bubble (pp-1)/m and (pp-1)/(v*m).
# The measured bubble is the share of the step that stage 0 spends waiting for boundary messages
# (the "pipeline wait" of the summary line, over the run's 4 steps).
# Usage: benchmarks/pipeline/bubble.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
trident=$build/trident
[[ -x $trident ]] || { echo "bubble.sh: $trident not built (make build)" >&2; exit 1; }
deck=$(mktemp --suffix=.toml)
trap 'rm -f "$deck"' EXIT
cat > "$deck" <<'TOML'
[model]
vocab_size = 256
seq_len = 64
layers = 8
hidden = 256
heads = 4
[train]
steps = 4
micro_batch = 2
[data]
format = "text"
path = "/usr/share/common-licenses/GPL-3"
[runtime]
log_every = 100
TOML
pp=2
printf '| schedule | v | m | analytic bubble | measured wait, stage 0 | peak micro-batches alive (stage 0 / 1) | saved activations MiB (stage 0 / 1) |\n|---|---|---|---|---|---|---|\n'
for m in 4 8 16; do
  for sched in gpipe 1f1b interleaved; do
    v=1; [[ $sched == interleaved ]] && v=2
    out=$(OPENBLAS_NUM_THREADS=1 mpiexec -n $pp "$trident" train "$deck" --set mesh.pp=$pp \
      --set mesh.schedule=$sched --set mesh.virtual_stages=$v --set train.global_batch=$((2 * m)) 2>&1)
    wait=$(grep -oE 'pipeline wait [0-9.]+%' <<<"$out" | grep -oE '[0-9.]+')
    peaks=$(grep -oE 'stage [0-9] \([a-z]+ recompute\): [0-9.]+ MiB saved for backward at the peak of [0-9]+' <<<"$out" |
      sort | sed -E 's/stage ([0-9]).*: ([0-9.]+) MiB.*of ([0-9]+)/\1 \2 \3/')
    peak0=$(awk '$1==0{print $3}' <<<"$peaks"); peak1=$(awk '$1==1{print $3}' <<<"$peaks")
    mem0=$(awk '$1==0{print $2}' <<<"$peaks"); mem1=$(awk '$1==1{print $2}' <<<"$peaks")
    analytic=$(awk -v p=$pp -v m=$m -v v=$v 'BEGIN{printf "%.1f%%", 100*(p-1)/(v*m)}')
    printf '| %s | %s | %s | %s | %s%% | %s / %s | %s / %s |\n' "$sched" $v $m "$analytic" "$wait" "$peak0" "$peak1" "$mem0" "$mem1"
  done
done
