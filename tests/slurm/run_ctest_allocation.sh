#!/usr/bin/env bash
# jobs/ctest_allocation.sh runs the mpi label inside an allocation of 2 nodes x 4 tasks. To keep the
# label cheap this runs the communication tests (test_comm_mesh and the topology command: the ones that
# assumed one node); the whole mpi label runs the same way by hand (jobs/ctest_allocation.sh -- -L mpi).
source "$(dirname "$0")/lib.sh" "$@"
"$SOURCE/jobs/ctest_allocation.sh" -N 2 -n 4 -b "$BUILD" -- -L mpi -R '^test_comm_mesh_np(2|4)$|^test_comm_topology_cli' \
  > ctest.log 2>&1 || { cat ctest.log; fail "ctest inside the allocation failed"; }
cat ctest.log
grep -q "ctest_allocation: job [0-9]*, nodes n\[1-2\]" ctest.log || fail "not run inside a 2-node allocation"
grep -qE "100% tests passed, 0 tests failed out of [1-9]" ctest.log || fail "not every test passed"
say PASS
