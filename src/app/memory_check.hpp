#pragma once
// `train` refuses, before allocating anything, a layout whose planner estimate of the memory per rank
// exceeds the memory available to each rank (runtime.memory_check = false skips the check).
#include <optional>
#include <string>

#include "core/config.hpp"

namespace trident {

// Bytes this rank will need at its peak: the planner's per-rank estimate (src/planner/memory_model),
// or, when larger, the model states plus the whole-model fp32 copy that start-up initialises from.
double estimated_rank_bytes(const Config& cfg);

// Memory this node can still give, in bytes: MemAvailable, lowered to the cgroup's limit minus its
// usage when a limit is set (cgroup v2 or v1). 0 when /proc/meminfo cannot be read.
double available_node_bytes();

// The refusal message when `needed` bytes per rank exceed `available` bytes per rank (the node's
// figure divided among `ranks_on_node`), naming both figures and the changes that would fit; empty
// when the layout fits.
std::optional<std::string> memory_refusal(const Config& cfg, double needed, double available, double node_available,
                                          int ranks_on_node);

// The check itself: throws trident::Error with memory_refusal's message. No-op when
// runtime.memory_check is false or the backend is not the CPU (device memory is the backend's).
void check_memory_fits(const Config& cfg, int ranks_on_node);

}  // namespace trident
