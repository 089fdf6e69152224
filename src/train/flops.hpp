#pragma once
// Model FLOPs, for throughput and MFU.
#include <cstdint>

#include "model/shapes.hpp"

namespace trident {

// Training FLOPs per token (forward + backward, recompute not counted), the convention of PaLM and
// llm.c: 6 * parameters (every matrix multiply, embeddings and LM head included, counted once when
// tied) + 12 * L * C * T for the attention score and value products (QK^T and AV, each 2*T*C FLOPs
// per token per layer in forward, twice that in backward; the causal mask is not discounted).
double model_flops_per_token(const GptShapes& s, int64_t parameter_count);

}  // namespace trident
