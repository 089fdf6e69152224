#!/usr/bin/env bash
# Run trident's ctest suite inside a Slurm allocation of several nodes, where users run the MPI tests:
#
#   jobs/ctest_allocation.sh [-N NODES] [-n TASKS_PER_NODE] [-b BUILD_DIR] [CTEST ARGS...]
#   jobs/ctest_allocation.sh -N 2 -n 4 -- -L mpi          # the default: the mpi label on 2 nodes x 4
#
# It asks for the allocation itself (salloc) unless it already runs in one (SLURM_JOB_ID set, e.g.
# inside `salloc` or an sbatch script). Inside, each test's `mpiexec` starts its ranks through Slurm
# (MPICH's hydra uses srun), block-distributed over the allocated nodes, so the tests see several nodes.
# Extra salloc options: SALLOC_ARGS="--time=30 --partition=debug".
set -euo pipefail
nodes=2 per_node=4
build=${SLURM_SUBMIT_DIR:-$PWD}/build
while getopts "N:n:b:h" opt; do
  case $opt in
    N) nodes=$OPTARG ;;
    n) per_node=$OPTARG ;;
    b) build=$OPTARG ;;
    *) sed -n '2,11p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ $# -gt 0 ]] || set -- -L mpi
[[ -f $build/CTestTestfile.cmake ]] || { echo "ctest_allocation: no build in $build (use -b BUILD_DIR)" >&2; exit 2; }

if [[ -z ${SLURM_JOB_ID:-} ]]; then
  # shellcheck disable=SC2086  # SALLOC_ARGS is a list of options
  exec salloc -N "$nodes" --ntasks-per-node="$per_node" ${SALLOC_ARGS:-} "$0" -N "$nodes" -n "$per_node" -b "$build" -- "$@"
fi
echo "ctest_allocation: job $SLURM_JOB_ID, nodes $SLURM_JOB_NODELIST, $SLURM_NTASKS task slots: ctest $*"
export OPENBLAS_NUM_THREADS=1
# Each test launches its own mpiexec; it must not inherit one step's task environment.
cd "$build" && ctest --output-on-failure "$@"
