#pragma once
// The dimensions and components of the model a rank holds (GPT-2 or Llama-shaped), derived once from the deck.
#include <cstdint>

#include "core/config.hpp"

namespace trident {

struct GptShapes {
  int64_t V = 0;   // vocabulary (real)
  int64_t Vp = 0;  // stored vocabulary, padded to a multiple of lcm(vocab_pad_to, tp); padding rows stay zero
  int64_t T = 0;   // sequence length (max positions)
  int64_t L = 0;   // layers
  int64_t C = 0;   // hidden
  int64_t NH = 0;  // heads
  int64_t KVH = 0;  // key/value heads (grouped-query attention; == NH for multi-head)
  int64_t HD = 0;  // head dim
  int64_t F = 0;   // MLP inner width
  bool tied = true;
  Architecture arch = Architecture::Gpt2;  // tensor names and layout
  bool rmsnorm = false;  // RMSNorm (weight only) instead of LayerNorm
  float norm_eps = 1e-5f;
  bool rope = false;  // rotary q and k instead of learned position embeddings
  double rope_theta = 10000.0;
  bool swiglu = false;  // SwiGLU MLP (gate and up projections) instead of GELU
  bool bias = true;     // biases of the linear layers and LayerNorm

  int64_t qkv_width() const { return (NH + 2 * KVH) * HD; }  // q | k | v of a position
  int64_t fc_width() const { return swiglu ? 2 * F : F; }    // gate | up, or c_fc
  bool norm_bias() const { return bias && !rmsnorm; }

  static GptShapes from(const ModelConfig& m, int tp = 1);
};

// Rows of the LM head's fp32 logits computed at once (train.logits_chunk_mib): as many rows of vocab_rows
// floats as chunk_bytes holds, at least one, at most positions; chunk_bytes 0: all positions.
int64_t logits_chunk_rows(int64_t chunk_bytes, int64_t vocab_rows, int64_t positions);

}  // namespace trident
