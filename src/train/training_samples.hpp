#pragma once
// train.sample_every: text sampled from the model as it trains (as llm.c prints during training), through
// the KV-cache decoder of `trident generate` (generate/), on each TP group (pp = 1, checked by the deck).
#include <cstdint>
#include <string>

#include "comm/mesh.hpp"
#include "core/config.hpp"
#include "kernels.hpp"
#include "model/gpt.hpp"
#include "text/text_codec.hpp"

namespace trident {

class TrainingSamples {
 public:
  TrainingSamples(const Config& cfg, Kernels& kernels, ParallelMesh* mesh);
  bool due(int64_t step) const { return every_ > 0 && step % every_ == 0; }
  // A sample of up to train.sample_tokens tokens after train.sample_prompt (temperature 1, seeded by the
  // model seed and the step; ends at an end-of-text token), the prompt and the sample as text; the same on every rank. `params` is the whole chunk's parameters
  // in backend memory, or null (ZeRO-3), when `host_params` (gathered over DP) are copied to the backend
  // for the sample's duration. Collective over the TP group.
  std::string sample(const GptModel& model, const float* params, const std::vector<float>& host_params,
                     int64_t step);

 private:
  Kernels& k_;
  Group* tp_;
  int64_t every_, tokens_;
  uint64_t seed_;
  text::TextCodec codec_;
  std::vector<int32_t> prompt_;
  std::string prompt_text_;  // printed before the sample (empty for the end-of-text token)
};

}  // namespace trident
