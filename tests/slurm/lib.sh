# Set-up of the slurm-label tests (sourced). Usage in a test: source lib.sh CLUSTER_DIR BUILD_DIR SOURCE_DIR.
# Each test works in a fresh directory; the job helpers (submit, wait_job_gone, wait_lines, rank_pids)
# are in jobs.sh.
set -euo pipefail
CLUSTER=$1 BUILD=$2 SOURCE=$3
TRIDENT=$BUILD/trident
source "$SOURCE/tests/slurm/jobs.sh"
# Exit 77: ctest reports the test as skipped (SKIP_RETURN_CODE), with this reason in its output.
if [[ -f $CLUSTER/unavailable ]]; then echo "skipped: no local Slurm cluster: $(cat "$CLUSTER/unavailable")"; exit 77; fi
[[ -f $CLUSTER/env.sh ]] || fail "the cluster fixture did not start (no $CLUSTER/env.sh)"
source "$CLUSTER/env.sh"
unset SLURM_JOB_ID SLURM_JOBID  # a test run inside an allocation must not look like one to sbatch

WORK=$(mktemp -d "${TMPDIR:-/tmp}/trident-slurm-XXXXXX")
cd "$WORK"
say "work directory $WORK"

# A tiny deck: 4 layers (pp 2), 4 heads (tp 2), constant learning rate (the trajectory of the first
# steps does not depend on train.steps); checkpoint.dir is given per job.
write_deck() {
  cat > "$1" <<DECK
[model]
vocab_size = 256
seq_len = 32
layers = 4
hidden = 32
heads = 4
seed = 7
[mesh]
tp = 1
pp = 1
dp = "auto"
[train]
steps = 100
micro_batch = 2
global_batch = 8
lr = 1e-3
warmup_steps = 0
lr_schedule = "constant"
[data]
format = "text"
path = "/usr/share/common-licenses/GPL-3"
order = "shuffle"
[runtime]
mpi_wait = "poll"
log_every = 10
DECK
}

# Bitwise equality of the parameters and AdamW moments of two checkpoints (h5diff compares exactly).
same_state() {
  local a=$1 b=$2 g
  for g in /model /optim; do
    h5diff -q "$a" "$b" "$g" "$g" || { h5diff -r "$a" "$b" "$g" "$g" | head -20; return 1; }
  done
}

show_outputs() { for f in "$WORK"/*.out; do echo "=== $f"; tail -n 40 "$f"; done; }
# On any exit: cancel what this test submitted (a failed test must leave no job behind).
finish() {
  local rc=$?
  (( rc != 0 && rc != 77 )) && show_outputs
  [[ -s $WORK/.jobs ]] && scancel $(cat "$WORK/.jobs") 2>/dev/null
  exit $rc
}
trap finish EXIT
