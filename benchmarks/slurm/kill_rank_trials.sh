#!/usr/bin/env bash
# Time from kill -9 of one rank to the end of the whole Slurm job, over TRIALS trials (default 20):
# a 2-node x 1-task job of the tiny test deck; after 5 steps one rank gets SIGKILL; the clock stops when
# Slurm reports the job finished. Prints every trial, the median and the max.
#   benchmarks/slurm/kill_rank_trials.sh [TRIALS]
source "$(dirname "$0")/common.sh"
trials=${1:-20}
write_deck deck.toml  # tests/slurm/jobs.sh; trained "forever" below (train.steps=1000000)
times=()
for t in $(seq "$trials"); do
  m=$WORK/m$t.jsonl
  id=$(submit k$t -N2 --ntasks-per-node=1 -- deck.toml --set train.steps=1000000 --set runtime.metrics="$m")
  wait_lines "$m" 5 600
  victim=$(rank_pids "$m" | tail -n1)
  t0=$(date +%s.%N)
  kill -9 "$victim"
  wait_job_gone "$id" 600 0.1
  t1=$(date +%s.%N)
  dt=$(/usr/bin/python3 -c "print(f'{$t1 - $t0:.2f}')")
  times+=("$dt")
  echo "trial $t: job $id $(job_state "$id") ${dt} s after kill -9"
done
/usr/bin/python3 -c "
import statistics, sys
v = [float(x) for x in sys.argv[1:]]
print(f'kill -9 of one rank -> job end, {len(v)} trials: median {statistics.median(v):.2f} s, max {max(v):.2f} s, min {min(v):.2f} s')
" "${times[@]}"
grep -h '^KillWait' "$SLURM_CONF"
