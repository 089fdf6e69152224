#pragma once
// The memory of every rank at the end of training, in one block of the log written by world rank 0:
// its measured peak resident set and the part of it each category holds (train/metrics.hpp).
#include "comm/mesh.hpp"
#include "train/metrics.hpp"

namespace trident {

// Collective over the world (mesh may be null: one rank).
void log_memory_per_rank(const MemoryAccount& mine, ParallelMesh* mesh);

}  // namespace trident
