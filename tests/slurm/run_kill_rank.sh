#!/usr/bin/env bash
# kill -9 of one rank mid-step: the whole job must end within 60 s (srun --kill-on-bad-exit), not be
# requeued, the newest checkpoint must verify, and a resubmitted job must resume from it. Then a
# checkpoint that cannot finish before Slurm's SIGKILL (scancel -> SIGTERM -> the agreed checkpoint
# stalls before its rename -> KillWait -> SIGKILL) must leave only a .tmp: `latest` and the newest
# complete checkpoint stay as they were, and the job is not requeued.
source "$(dirname "$0")/lib.sh" "$@"
write_deck deck.toml
id=$(submit victim -N2 --ntasks-per-node=1 -- deck.toml --set train.steps=100000 --set checkpoint.every_steps=20 \
       --set checkpoint.dir=ckpt --set runtime.metrics=$WORK/victim.jsonl)
wait_lines "$WORK/victim.jsonl" 50 120
pids=$(rank_pids "$WORK/victim.jsonl")
[[ $(wc -w <<< "$pids") == 2 ]] || fail "expected 2 ranks, found pids: $pids"
victim=$(tail -n1 <<< "$pids")
t0=$(date +%s.%N)
kill -9 "$victim"
wait_job_gone "$id" 60
t1=$(date +%s.%N)
say "job ended $(/usr/bin/python3 -c "print(f'{$t1 - $t0:.1f}')") s after kill -9 of pid $victim"
[[ $(job_state "$id") == FAILED ]] || fail "job ended $(job_state "$id"), expected FAILED"
[[ $(job_field "$id" Restarts) == 0 ]] || fail "a killed job must not be requeued"
[[ -z $(rank_pids "$WORK/victim.jsonl") ]] || fail "ranks left running"
# The kill may land between a checkpoint's rename and the update of `latest`: then `latest` names the
# one before, and resume (which goes by the files) takes the newest complete file. Both must verify.
newest=$(ls ckpt/step_*.h5 | sort | tail -n1)
"$TRIDENT" ckpt verify "$newest" || fail "the newest checkpoint $newest does not verify"
latest=ckpt/$(cat ckpt/latest)
[[ $latest == "$newest" || $latest == $(ls ckpt/step_*.h5 | sort | tail -n2 | head -n1) ]] ||
  fail "latest names $latest, neither the newest checkpoint $newest nor the one before"
"$TRIDENT" ckpt verify "$latest" || fail "the checkpoint named by latest, $latest, does not verify"
step=$((10#$(basename "$newest" .h5 | sed 's/step_//')))
id2=$(submit resumed -N2 --ntasks-per-node=1 -- deck.toml --set train.steps=$((step + 5)) --set checkpoint.dir=ckpt)
wait_job_gone "$id2" 120
[[ $(job_state "$id2") == COMPLETED ]] || fail "resubmitted job ended $(job_state "$id2")"
grep -q "checkpoint: resumed from .*step_$(printf '%08d' $step).h5 (step $step" "$WORK/resumed-$id2.out" ||
  fail "the resubmitted job did not resume from step $step"
say "killed job ended in time, checkpoint verified, resubmitted job resumed"

before=$(cat ckpt/latest)
id3=$(TRIDENT_INJECT_FAULT=checkpoint-stall:before_rename submit stalled -N2 --ntasks-per-node=1 -- deck.toml \
        --set train.steps=100000 --set checkpoint.dir=ckpt --set runtime.metrics=$WORK/stalled.jsonl)
wait_lines "$WORK/stalled.jsonl" 5 120
scancel "$id3"
wait_job_gone "$id3" 60
grep -q "stalling until killed" "$WORK/stalled-$id3.out" || fail "the stalled write was not reached"
[[ $(cat ckpt/latest) == "$before" ]] || fail "latest changed from $before to $(cat ckpt/latest)"
ls ckpt/*.h5.tmp > /dev/null 2>&1 || fail "no .tmp left by the killed write"
"$TRIDENT" ckpt verify "ckpt/$before" || fail "the newest complete checkpoint does not verify"
[[ $(job_field "$id3" Restarts) == 0 ]] || fail "a cancelled job must not be requeued"
say "PASS"
