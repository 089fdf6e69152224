#!/usr/bin/env bash
# Signal -> checkpoint -> requeue -> resume, driven by Slurm, on 2 nodes (dp 2): SIGUSR1 to the batch
# shell only (`scancel --signal=USR1 --batch`, which jobs/train.sbatch forwards) and to the batch shell,
# srun and the tasks (`--full`: each rank gets it more than once, at slightly different times). Each job
# must write exactly one requested checkpoint, exit 75, be requeued, resume, and end with parameters and
# AdamW moments bitwise equal to an uninterrupted job's.
source "$(dirname "$0")/lib.sh" "$@"
write_deck deck.toml
steps=400
run() { submit "$1" -N2 --ntasks-per-node=1 -- deck.toml --set train.steps=$steps --set checkpoint.dir=$1-ckpt \
          --set runtime.metrics=$WORK/$1.jsonl; }
ref=$(run ref)
batch=$(run batch)
full=$(run full)
wait_lines "$WORK/batch.jsonl" 20 120
scancel --signal=USR1 --batch "$batch"
wait_lines "$WORK/full.jsonl" 20 120
scancel --signal=USR1 --full "$full"
for id in $ref $batch $full; do wait_job_gone "$id" 240; done
final=$(printf 'step_%08d.h5' $steps)
for name in batch full; do
  id=${!name}
  out=$WORK/$name-$id.out
  [[ $(job_state "$id") == COMPLETED ]] || fail "$name job ended $(job_state "$id")"
  [[ $(job_field "$id" Restarts) == 1 ]] || fail "$name job restarted $(job_field "$id" Restarts) times, expected 1"
  n=$(grep -c "(requested) ->" "$out" || true)
  [[ $n == 1 ]] || fail "$name job wrote $n requested checkpoints, expected exactly 1"
  grep -q "SIGUSR1 received by step" "$out" || fail "$name: no signal logged"
  grep -q "checkpointed and stopped (status 75): requeueing" "$out" || fail "$name: not requeued on status 75"
  grep -q "checkpoint: resumed from" "$out" || fail "$name: the rerun did not resume"
  grep -q '"event":"resume"' "$WORK/$name.jsonl" || fail "$name: no resume marker in the metrics"
  grep -q '"restart":1' "$WORK/$name.jsonl" || fail "$name: no record of restart 1 in the metrics"
  same_state "ref-ckpt/$final" "$name-ckpt/$final" || fail "$name: final state differs from the uninterrupted job's"
  say "$name: one checkpoint on the signal, requeued, resumed, bitwise equal to the uninterrupted job"
done
# The run's plot (jobs/plot_run.py) reads the restarted metrics: one resume, every step once.
/usr/bin/python3 "$SOURCE/jobs/plot_run.py" "$WORK/batch.jsonl" -o "$WORK/batch.png" > plot.log 2>&1 ||
  { cat plot.log; fail "plot_run.py failed"; }
grep -q "plot_run: $steps steps -> $WORK/batch.png" plot.log || { cat plot.log; fail "plot_run.py did not plot $steps steps"; }
[[ $(head -c 4 "$WORK/batch.png" | od -An -c | tr -d ' ') == '211PNG' ]] || fail "batch.png is not a PNG"
say PASS
