#!/bin/sh
# Runs the fake-node test program on 8 ranks split over two fake nodes of this host.
#   run_fake_nodes.sh block|roundrobin MPIEXEC PROGRAM [args...]
# block:      a hydra hosts file of two names hydra treats as this host ("localhost:4" and
#             "$(hostname):4", or "127.0.0.1:4") gives block placement: ranks 0-3 on node 0, ranks 4-7 on node 1, as
#             MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) reports them.
# roundrobin: MPIR_CVAR_NUM_CLIQUES=2 makes MPICH's split_type see two cliques, rank r on r % 2.
# Inside a Slurm allocation of several nodes the job still runs on this host (hydra's fork launcher), as
# every job a test starts itself does (tests/common/test_support.hpp, local_mpiexec).
set -eu
mode=$1 mpiexec=$2 program=$3
shift 3
fork=""
[ "${SLURM_JOB_NUM_NODES:-1}" -gt 1 ] && fork="-launcher fork"
case $mode in
  block)
    hosts=$(mktemp "${TMPDIR:-/tmp}/trident-hosts-XXXXXX")
    trap 'rm -f "$hosts"' EXIT
    host=$(hostname)
    [ "$host" = localhost ] && host=127.0.0.1  # any second name of this host will do
    printf 'localhost:4\n%s:4\n' "$host" > "$hosts"
    TRIDENT_FAKE_NODES=block "$mpiexec" $fork -f "$hosts" -n 8 "$program" "$@"
    ;;
  roundrobin)
    TRIDENT_FAKE_NODES=roundrobin MPIR_CVAR_NUM_CLIQUES=2 "$mpiexec" $fork ${fork:+-hosts localhost} -n 8 "$program" "$@"
    ;;
  *)
    echo "usage: $0 block|roundrobin MPIEXEC PROGRAM [args...]" >&2
    exit 2
    ;;
esac
