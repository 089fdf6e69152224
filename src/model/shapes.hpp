#pragma once
// The dimensions of the GPT-2 model a rank holds, derived once from the deck.
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
  int64_t HD = 0;  // head dim
  int64_t F = 0;   // MLP inner width
  bool tied = true;

  static GptShapes from(const ModelConfig& m, int tp = 1);
};

}  // namespace trident
