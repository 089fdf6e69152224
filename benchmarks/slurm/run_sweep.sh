#!/usr/bin/env bash
# The scaling sweep of jobs/sweep.sh on the local cluster: the tiny test model (4 layers, hidden 64,
# global batch 16 sequences of 64 tokens) on 1, 2 and 4 nodes x 1 task (dp = 1, 2, 4), 60 steps each.
# Writes benchmarks/slurm/sweep/sweep.csv and sweep.png (committed).
#   benchmarks/slurm/run_sweep.sh
source "$(dirname "$0")/common.sh"
cat > deck.toml <<DECK
[model]
vocab_size = 256
seq_len = 64
layers = 4
hidden = 64
heads = 4
[mesh]
dp = "auto"
[train]
steps = 60
micro_batch = 4
global_batch = 16
[data]
format = "text"
path = "/usr/share/common-licenses/GPL-3"
[runtime]
mpi_wait = "poll"
DECK
TRIDENT=$TRIDENT "$SOURCE/jobs/sweep.sh" -n 1 -o "$WORK/sweep" deck.toml "1 2 4"
mkdir -p "$SOURCE/benchmarks/slurm/sweep"
cp "$WORK/sweep/sweep.csv" "$WORK/sweep/sweep.png" "$SOURCE/benchmarks/slurm/sweep/"
