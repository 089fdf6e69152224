#!/usr/bin/env bash
# Time from a stop signal to the end of the job, and steps lost, for a GPT-2 124M-shaped model
# (input/gpt2-124m.toml: 12 layers, hidden 768, vocab 50257, fp32 AdamW, checkpoint 1.49 GB) on one
# rank of the local Slurm cluster, with seq_len 64 and 4 sequences per step so that a step takes about
# a second on 2 cores. Two stops, each on a fresh job: `scancel --signal=USR1 --batch` (what
# `--signal=B:USR1@N` does before a time limit) and `scancel` (SIGTERM, as at the time limit itself).
#   benchmarks/slurm/signal_to_exit.sh
source "$(dirname "$0")/common.sh"
ms() { date +%s%3N; }
for how in usr1 term; do
  m=$WORK/$how.jsonl
  id=$(TRIDENT_MAX_REQUEUES=0 submit "$how" -N1 --ntasks-per-node=1 -- "$SOURCE/input/gpt2-124m.toml" \
        --set model.seq_len=64 --set train.micro_batch=4 --set train.global_batch=4 --set train.steps=100000 \
        --set data.format=text --set data.path=/usr/share/common-licenses/GPL-3 --set 'data.val_path=""' \
        --set data.val_every=0 --set checkpoint.dir=ckpt-$how --set runtime.metrics="$m")
  wait_lines "$m" 3 600
  t0=$(ms)
  if [[ $how == usr1 ]]; then scancel --signal=USR1 --batch "$id"; else scancel "$id"; fi
  wait_job_gone "$id" 600 0.1
  t1=$(ms)
  out=$WORK/$how-$id.out
  last=$(/usr/bin/python3 -c "import json; print(max(json.loads(l)['step'] for l in open('$m') if 'loss' in l))")
  ck=$(sed -n 's/.*checkpoint: step \([0-9]*\) (requested).*: \([0-9.]*\) MB in \([0-9.]*\) s.*/\1 \2 \3/p' "$out")
  read -r ck_step ck_mb ck_s <<< "$ck"
  step_ms=$(/usr/bin/python3 -c "
import json, statistics
print(round(statistics.median(json.loads(l)['step_ms'] for l in open('$m') if 'loss' in l)))")
  echo "$how: signal -> job end $(( t1 - t0 )) ms; checkpoint of step $ck_step ($ck_mb MB) written in $ck_s s;" \
       "last step run $last: $(( last - ck_step )) steps lost; median step $step_ms ms"
done
