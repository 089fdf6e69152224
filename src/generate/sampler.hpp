#pragma once
// Choosing the next token from a row of logits: greedy, or sampled with temperature, top-k and top-p
// (nucleus) from a counter-based random stream, so a seed gives the same tokens on any rank count and
// backend that gives the same logits.
#include <cstdint>
#include <vector>

namespace trident {

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy (the first of the largest logits)
  int64_t top_k = 0;         // keep the k most likely tokens; 0: all
  double top_p = 1.0;        // keep the smallest set of most likely tokens whose probability reaches p
  uint64_t seed = 0;
};

// Refuses out-of-range options (temperature < 0, top_k < 0, top_p outside (0, 1]) with a message.
void check_sampling_options(const SamplingOptions& options);

class TokenSampler {
 public:
  // `stream`: which of the seed's independent streams (one per sample).
  TokenSampler(const SamplingOptions& options, uint64_t stream);
  // The next token from logits[0, V). Draw i of a stream is a function of (seed, stream, i) alone.
  int32_t next(const float* logits, int64_t V);

 private:
  double uniform();  // [0, 1)

  SamplingOptions options_;
  uint64_t key_;
  uint64_t draws_ = 0;
  std::vector<int32_t> order_;
  std::vector<double> probs_;
};

}  // namespace trident
