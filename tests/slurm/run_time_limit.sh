#!/usr/bin/env bash
# A job that reaches its time limit (--time=1): Slurm sends SIGTERM, the ranks checkpoint and exit 75
# within KillWait, jobs/train.sbatch requeues, the rerun resumes and ends bitwise equal to an
# uninterrupted job.
source "$(dirname "$0")/lib.sh" "$@"
write_deck deck.toml
# Slurm enforces a time limit in its 30 s background pass, so a one-minute job ends 60-90 s after it
# started. Each step of the limited job sleeps SLEEP_MS (TRIDENT_INJECT_FAULT=slow-step), so its run
# needs at least STEPS x SLEEP_MS = 95 s on any machine (the step's compute, 3-8 ms here, adds to that)
# and the rerun's remaining 5-50 s fit in its own minute. (A step count calibrated from a measured step
# time was not enough: a CI machine measured 6 ms, then ran at 4.2 ms and finished in 65 s.)
SLEEP_MS=50
steps=$((95000 / SLEEP_MS))
say "$steps steps of at least $SLEEP_MS ms"
run() { submit "$1" -N1 --ntasks-per-node=1 "${@:2}" -- deck.toml --set train.steps=$steps \
          --set checkpoint.dir=$1-ckpt --set runtime.metrics=$WORK/$1.jsonl; }
ref=$(run ref)
# jobs/train.sbatch asks for SIGUSR1 300 s before the limit (#SBATCH --signal=B:USR1@300), which with a
# one-minute limit comes at once and checkpoints before the limit (the other path, tested with scancel
# in run_signal_requeue.sh); here a harmless SIGURG replaces it, so that the job really reaches its limit.
limited=$(TRIDENT_INJECT_FAULT=slow-step:$SLEEP_MS run limited --time=1 --signal=B:URG@5)
for id in $ref $limited; do wait_job_gone "$id" 400; done
out=$WORK/limited-$limited.out
# The last run must have finished training (on a loaded machine it may end right at its own time limit,
# which Slurm then reports as TIMEOUT although trident exited 0; each run before it was requeued).
grep 'trident.sbatch' "$out" | tail -n1 | grep -q "trident exited with status 0" ||
  fail "the time-limited job did not finish training (state $(job_state "$limited"))"
grep -q "DUE TO TIME LIMIT" "$out" || fail "the job never reached its time limit"
grep -q "SIGTERM received by step" "$out" || fail "no SIGTERM logged"
grep -q "checkpointed and stopped (status 75): requeueing" "$out" || fail "not requeued on status 75"
grep -q "checkpoint: resumed from" "$out" || fail "the rerun did not resume"
final=$(printf 'step_%08d.h5' $steps)
same_state "ref-ckpt/$final" "limited-ckpt/$final" || fail "final state differs from the uninterrupted job's"
say "PASS: time limit -> SIGTERM -> checkpoint -> requeue -> resume, bitwise equal"
