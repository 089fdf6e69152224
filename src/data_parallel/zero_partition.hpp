#pragma once
// ZeRO partitions: the DP ranks split each chunk's flat parameter layout into contiguous ranges.
// Rank r owns [bounds[r], bounds[r+1]): its optimizer state, its updated parameters (ZeRO-1/2) and
// its reduced gradients (ZeRO-2). Contiguous ranges keep the optimizer a plain loop and make a rank's
// part of every tensor one or two hyperslabs in a checkpoint.
#include <cstdint>
#include <vector>

namespace trident {

// Elements a partition boundary is aligned to (256 bytes of fp32): whole cache lines and vector
// registers per rank, and sizes within this many elements of each other.
inline constexpr int64_t kZeroAlignment = 64;

// parts + 1 boundaries from 0 to total; every inner boundary a multiple of `align`, every range's
// size within `align` of every other's (the last one may be shorter when total is not aligned).
std::vector<int64_t> partition_flat(int64_t total, int parts, int64_t align = kZeroAlignment);

}  // namespace trident
