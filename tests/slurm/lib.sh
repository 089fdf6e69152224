# Set-up of the slurm-label tests (sourced). Usage in a test: source lib.sh CLUSTER_DIR BUILD_DIR SOURCE_DIR.
# Each test works in a fresh directory; the job helpers (submit, wait_job_gone, wait_lines, rank_pids)
# and the tiny deck (write_deck) are in jobs.sh.
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
