# Slurm job helpers and the tiny deck they train (sourced), shared by the slurm-label tests (lib.sh)
# and the Slurm benchmarks (benchmarks/slurm/common.sh). The caller sets SOURCE (the source tree),
# TRIDENT (the binary) and WORK (where job outputs go); every job is submitted with jobs/train.sbatch,
# as a user would.

say() { printf '[%(%T)T] %s\n' -1 "$*"; }
fail() { say "FAIL: $*"; exit 1; }

# submit NAME SBATCH_OPTIONS... -- DECK ARGS...: prints the job id (also kept in $WORK/.jobs).
submit() {
  local name=$1; shift
  local opts=()
  while [[ $1 != -- ]]; do opts+=("$1"); shift; done
  shift
  local id
  id=$(TRIDENT=$TRIDENT sbatch --parsable --job-name="$name" --output="$WORK/$name-%j.out" "${opts[@]}" \
         "$SOURCE/jobs/train.sbatch" "$@")
  echo "$id" >> "$WORK/.jobs"
  echo "$id"
}

job_field() { scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }
job_state() { job_field "$1" JobState; }

# Waits until the job has left the queue for good (not pending a requeue), at most LIMIT seconds,
# asking slurmctld every POLL seconds (default 1; the benchmarks, which time how soon a job ends, 0.1).
wait_job_gone() {
  local id=$1 limit=$2 poll=${3:-1} t0=$SECONDS state
  while (( SECONDS - t0 < limit )); do
    state=$(job_state "$id")
    case $state in
      COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED|"") return 0 ;;
    esac
    sleep "$poll"
  done
  fail "job $id still $state after $limit s"
}

# Waits until FILE has at least N lines, at most LIMIT seconds.
wait_lines() {
  local file=$1 n=$2 limit=$3 t0=$SECONDS
  while (( SECONDS - t0 < limit )); do
    [[ -f $file && $(wc -l < "$file") -ge $n ]] && return 0
    sleep 0.1
  done
  fail "$file has fewer than $n lines after $limit s"
}

# The trident ranks (process name "trident", not srun) whose command line contains PATTERN.
rank_pids() {
  local p
  for p in $(pgrep -f "$1" || true); do [[ $(cat "/proc/$p/comm" 2>/dev/null) == trident ]] && echo "$p"; done
  return 0
}

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
