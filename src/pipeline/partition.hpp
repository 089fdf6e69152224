#pragma once
// Stage partition: which layers each of the pp*virtual_stages pipeline chunks holds. Chunk g
// (virtual stage g, in model order) lives on pipeline rank g % pp as that rank's local chunk g / pp;
// chunk 0 also holds the embedding, the last chunk the final LayerNorm, LM head and loss.
#include <cstdint>
#include <vector>

#include "core/config.hpp"
#include "model/parameters.hpp"

namespace trident {

// Layers per chunk: mesh.layers_per_stage when given, else contiguous layers balanced by estimated
// cost (a layer costs its GEMM FLOPs per token, 24C^2 + 4TC; the head adds 2CV to the last chunk),
// minimising the most expensive chunk with at least one layer each.
std::vector<int64_t> partition_layers(const Config& cfg);

// The model part of global chunk g under `sizes`.
ChunkSpec chunk_spec(const std::vector<int64_t>& sizes, int64_t g);

}  // namespace trident
