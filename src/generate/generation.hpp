#pragma once
// Autoregressive generation: a prompt, then tokens chosen one at a time (generate/sampler.hpp) from the
// logits of the KV-cache decoder (generate/decoder.hpp). Several samples of one prompt are decoded side
// by side as the decoder's batch.
#include <cstdint>
#include <vector>

#include "generate/decoder.hpp"
#include "generate/sampler.hpp"

namespace trident {

struct GenerationRequest {
  std::vector<int32_t> prompt;  // at least one token
  int64_t max_new_tokens = 0;
  SamplingOptions sampling;
  int32_t stop_token = -1;  // a sample ends with this token (kept in it); -1: none
};

struct GenerationResult {
  std::vector<std::vector<int32_t>> samples;  // the new tokens of each sample
  double prompt_seconds = 0, decode_seconds = 0;
  int64_t decoded_steps = 0;  // calls of the decoder after the prompt
};

// Fed tokens never exceed the decoder's max_len: prompt + max_new_tokens - 1 <= decoder.max_len()
// (the last token is chosen, not fed). The decoder is reset first; one sample per sequence of its batch.
// Sample s draws from stream s of the seed. Collective over the decoder's TP group.
GenerationResult generate(Decoder& decoder, const GenerationRequest& request);

// Positions a decoder needs for `request`.
inline int64_t positions_needed(const GenerationRequest& r) {
  return int64_t(r.prompt.size()) + (r.max_new_tokens > 0 ? r.max_new_tokens - 1 : 0);
}

}  // namespace trident
