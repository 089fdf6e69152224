#!/bin/sh
# Restart time of GPT-2 124M (the real model of input/gpt2-124m.toml, AdamW state included): from
# launching `mpiexec -n NP trident train` to the end of its first step, fresh and resumed.
#   benchmarks/checkpoint/restart.sh [BUILD_DIR] [DIR]    (defaults: build, a fresh folder in $TMPDIR)
# Environment: NP (default 2: dp = 2), MPIEXEC (default mpiexec).
#
# Training data: the GPL-3 text (byte tokens; any text serves, only the time matters). One sequence
# of 1024 tokens per rank and step keeps the step short on a CPU.
#   1. fresh: 2 steps, a checkpoint after each (keep 1): launch -> first step; the trainer's write log.
#   2. resumed: train.steps = 3, so the run resumes from step 2 and trains step 3.
# Each phase is read from the log timestamps (rank 0, local time, ms) against the launch time.
set -eu
build=${1:-build}
dir=${2:-$(mktemp -d "${TMPDIR:-/tmp}/trident-restart-XXXXXX")}
mkdir -p "$dir"
np=${NP:-2}
mpiexec=${MPIEXEC:-mpiexec}
export OPENBLAS_NUM_THREADS=1
sets="--set mesh.dp=$np --set data.format=text --set data.path=/usr/share/common-licenses/GPL-3 \
 --set data.val_path= --set train.micro_batch=1 --set train.global_batch=$np --set runtime.log_every=1 \
 --set checkpoint.dir=$dir/ckpt --set checkpoint.every_steps=1 --set checkpoint.keep=1"

seconds() {  # HH:MM:SS.fff -> seconds since midnight
  echo "$1" | awk -F: '{ printf "%.3f", $1 * 3600 + $2 * 60 + $3 }'
}
# Seconds from the launch to the first log line matching $2 in log $1.
at() {
  t=$(grep -m1 -- "$2" "$1" | sed -n 's/^\[\([0-9:.]*\)\].*/\1/p')
  [ -n "$t" ] || { echo "restart.sh: no line matching '$2' in $1" >&2; exit 1; }
  awk -v a="$(seconds "$t")" -v b="$launch" 'BEGIN { printf "%.2f", a - b }'
}

echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for run in fresh resumed; do
  steps=2
  [ "$run" = resumed ] && steps=3
  log=$dir/$run.log
  echo "\$ $mpiexec -n $np $build/trident train input/gpt2-124m.toml $sets --set train.steps=$steps"
  launch=$(seconds "$(date +%H:%M:%S.%N | cut -c1-12)")
  # shellcheck disable=SC2086
  $mpiexec -n "$np" "$build/trident" train input/gpt2-124m.toml $sets --set train.steps=$steps >"$log" 2>&1 ||
    { cat "$log"; exit 1; }
  first=1
  [ "$run" = resumed ] && first=3
  echo "  $run: process up (deck read) $(at "$log" "trident train")s, trainer ready (weights initialised, checkpoint loaded) $(at "$log" "model: ")s," \
       "first step (step $first) done $(at "$log" "step $first/")s after the launch"
  grep -h -e 'checkpoint: loaded' -e 'checkpoint: resumed' -e 'checkpoint: step' -e "step $first/" "$log" | sed 's/^/    /'
done
