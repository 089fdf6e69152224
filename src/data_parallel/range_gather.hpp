#pragma once
// Collective assembly of a chunk's whole flat layout from the DP ranks' ZeRO ranges: each rank
// broadcasts its range (`bounds`, as zero_partition.hpp cuts them) and everyone ends with all of it.
// For what is kept in ranges between steps (ZeRO-3's parameter partitions, the fp32 masters of a
// bf16 working copy at ZeRO 1/2) when a checkpoint or a test needs the whole of it, in fp32.
#include <cstdint>
#include <vector>

#include "comm/group.hpp"
#include "kernels.hpp"

namespace trident {

// `mine`: this DP rank's range (backend memory); `host`: bounds.back() floats of host memory.
void gather_ranges_to_host(Group& dp, Kernels& kernels, const float* mine, const std::vector<int64_t>& bounds,
                           float* host);

}  // namespace trident
