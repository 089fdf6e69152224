#!/usr/bin/env bash
# A job on 4 nodes x 2 tasks (tp 2, pp 2, dp 2 by dp = "auto"): its own topology output must place every
# TP group inside one node, and name the four Slurm nodes. Then `srun --mpi=none` (every task a world of
# one rank) must be refused with the hint to use an MPI plugin, once per task, exit status 2.
source "$(dirname "$0")/lib.sh" "$@"
write_deck deck.toml
id=$(submit topo -N4 --ntasks-per-node=2 -- deck.toml --set mesh.tp=2 --set mesh.pp=2 --set train.steps=2)
wait_job_gone "$id" 120
out=$WORK/topo-$id.out
[[ $(job_state "$id") == COMPLETED ]] || fail "job $id ended $(job_state "$id")"
grep -q "Slurm job $id, 4 node(s)" "$out" || fail "the Slurm job is not logged"
grep -q "world 8 ranks on 4 node(s); mesh tp 2 x pp 2 x dp 2" "$out" || fail "no 8-rank topology on 4 nodes"
# Rows: rank node local dp pp tp host. Expected independently: srun's block distribution puts ranks
# 2k and 2k+1 on node k (n1..n4), and tp-dp-pp order makes them one TP group.
rows=$(grep -E '^ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+  n[0-9]+$' "$out")
[[ $(wc -l <<< "$rows") == 8 ]] || fail "expected 8 topology rows, got: $rows"
while read -r rank node local dp pp tp host; do
  [[ $host == "n$((rank / 2 + 1))" ]] || fail "rank $rank on $host, expected n$((rank / 2 + 1))"
  [[ $node == $((rank / 2)) && $local == $((rank % 2)) && $tp == $((rank % 2)) ]] ||
    fail "rank $rank: node $node local $local tp $tp (expected node $((rank / 2)), local and tp $((rank % 2)))"
done <<< "$rows"
grep -q "TP groups: \[0 1\] \[2 3\] \[4 5\] \[6 7\]" "$out" || fail "TP groups are not the node pairs"
grep -q "a TP group spans nodes" "$out" && fail "TP group reported across nodes"
say "TP groups inside nodes n1..n4"
rc=0
OPENBLAS_NUM_THREADS=1 srun --mpi=none -N2 -n2 "$TRIDENT" train deck.toml > none.log 2>&1 || rc=$?
cat none.log
(( rc != 0 )) || fail "srun --mpi=none was not refused"
[[ $(grep -c "Slurm started 2 tasks but MPI sees a world of 1 rank in each.*srun --mpi=pmi2" none.log) == 2 ]] ||
  fail "expected the --mpi hint from each of the 2 tasks"
grep -q "the job has 1 ranks" none.log && fail "the deck's rank-count error came instead of the hint"
say PASS
