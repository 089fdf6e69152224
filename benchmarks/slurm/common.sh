# Shared by the Slurm benchmarks (sourced): a local cluster of 4 nodes of its own (tests/slurm/local_cluster.sh,
# on ports 6917+ so that it never meets the test cluster), stopped on exit; jobs via jobs/train.sbatch.
set -euo pipefail
SOURCE=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-$SOURCE/build}
TRIDENT=$BUILD/trident
CLUSTER=$(mktemp -d "${TMPDIR:-/tmp}/trident-bench-slurm-XXXXXX")
chmod 755 "$CLUSTER"  # munged needs every directory above its socket searchable by all
WORK=$CLUSTER/work
mkdir -p "$WORK"
SLURM_PORT=${SLURM_PORT:-6917} "$SOURCE/tests/slurm/local_cluster.sh" start "$CLUSTER/cluster"
[[ -f $CLUSTER/cluster/env.sh ]] || { echo "no cluster: $(cat "$CLUSTER/cluster/unavailable")"; exit 1; }
trap '"$SOURCE/tests/slurm/local_cluster.sh" stop "$CLUSTER/cluster"' EXIT
source "$CLUSTER/cluster/env.sh"
unset SLURM_JOB_ID SLURM_JOBID
cd "$WORK"

source "$SOURCE/tests/slurm/jobs.sh"  # submit, job_state, wait_job_gone, wait_lines, rank_pids
