#!/usr/bin/env bash
# Scaling sweep: the same deck over several node counts (mesh.dp = "auto": data parallelism grows with
# the nodes), one sbatch job each, then one CSV and one PNG (tokens/s and efficiency against nodes).
#
#   jobs/sweep.sh [-n TASKS_PER_NODE] [-o OUTDIR] DECK "1 2 4" [--set section.key=value ...]
#
# Jobs run one after another (sbatch --wait), so that they do not share nodes. Each writes
# OUTDIR/nodes-N.jsonl; OUTDIR/sweep.csv and OUTDIR/sweep.png are made by jobs/sweep_collect.py
# (python3-matplotlib). Extra sbatch options: SBATCH_ARGS="--partition=gpu --time=20".
set -euo pipefail
per_node=1 out=sweep
while getopts "n:o:h" opt; do
  case $opt in
    n) per_node=$OPTARG ;;
    o) out=$OPTARG ;;
    *) sed -n '2,9p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
deck=${1:?usage: jobs/sweep.sh [-n TASKS_PER_NODE] [-o OUTDIR] DECK \"1 2 4\" [--set ...]}
node_counts=${2:?give the node counts, e.g. \"1 2 4\"}
shift 2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
for n in $node_counts; do
  echo "sweep: $n node(s) x $per_node task(s)"
  rm -f "$out/nodes-$n.jsonl"
  # shellcheck disable=SC2086  # SBATCH_ARGS is a list of options
  sbatch --wait -N "$n" --ntasks-per-node="$per_node" --job-name="sweep-$n" --output="$out/nodes-$n.out" \
    ${SBATCH_ARGS:-} "$here/train.sbatch" "$deck" --set mesh.dp=auto --set runtime.metrics="$out/nodes-$n.jsonl" "$@" ||
    { echo "sweep: the $n-node job failed (see $out/nodes-$n.out)" >&2; exit 1; }
done
/usr/bin/python3 "$here/sweep_collect.py" "$out" $node_counts
