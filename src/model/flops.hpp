#pragma once
// Model FLOPs: the one convention of the planner, the training summary (TFLOP/s, MFU) and the benchmarks.
// Every GEMM of a training step, counted as in Narayanan et al. 2021 (Sec. 5.1), with the causal mask
// discounted as llm.c's MFU does: per layer and token in the forward pass QKV 6C^2 (2C(C + 2 KVH HD) with
// grouped-query attention), output projection 2C^2, MLP 4CF (6CF for SwiGLU's three matrices), attention
// scores and values 2TC (4TC without the mask; a causal row attends to about half the keys, and the flash
// attention kernels of both backends skip the masked tiles); the LM head 2CV; backward twice the forward.
// Embedding lookups, LayerNorms, biases and recompute are not counted, the vocabulary padding neither.
// For GPT-2 this is llm.c's 6N + 6LTC (N the parameters) minus the non-GEMM parameters' terms and the
// padding (0.7% of 6N for the 124M model at T 1024; Narayanan's count, without the discount, is 6% more).
#include "core/config.hpp"

namespace trident {

// GEMM FLOPs of one layer's forward pass over `tokens` tokens of sequences of length m.seq_len.
double layer_forward_flops(const ModelConfig& m, double tokens);

// Training FLOPs (forward + backward, no recompute) per token of a step.
double model_flops_per_token(const ModelConfig& m);

}  // namespace trident
