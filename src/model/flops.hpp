#pragma once
// Model FLOPs: the one convention of the planner, the training summary (TFLOP/s, MFU) and the benchmarks.
// Every GEMM of a training step, counted as in Narayanan et al. 2021 (Sec. 5.1): per layer and token in the
// forward pass QKV 6C^2 (2C(C + 2 KVH HD) with grouped-query attention), output projection 2C^2, MLP 4CF
// (6CF for SwiGLU's three matrices), attention scores and values 4TC (the causal mask
// not discounted); the LM head 2CV; backward twice the forward. Embedding lookups, LayerNorms, biases and
// recompute are not counted, the vocabulary padding neither. For GPT-2 this is 6 * parameters +
// 12 * L * C * T minus the non-GEMM parameters' terms (< 0.1%).
#include "core/config.hpp"

namespace trident {

// GEMM FLOPs of one layer's forward pass over `tokens` tokens of sequences of length m.seq_len.
double layer_forward_flops(const ModelConfig& m, double tokens);

// Training FLOPs (forward + backward, no recompute) per token of a step.
double model_flops_per_token(const ModelConfig& m);

}  // namespace trident
