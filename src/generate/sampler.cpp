#include "generate/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.hpp"
#include "core/splitmix64.hpp"

namespace trident {

void check_sampling_options(const SamplingOptions& o) {
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
    throw Error(fmt::format("temperature {} must be >= 0 (0: greedy)", o.temperature));
  if (o.top_k < 0) throw Error(fmt::format("top-k {} must be >= 0 (0: no limit)", o.top_k));
  if (!(o.top_p > 0 && o.top_p <= 1)) throw Error(fmt::format("top-p {} must be in (0, 1]", o.top_p));
}

TokenSampler::TokenSampler(const SamplingOptions& options, uint64_t stream)
    : options_(options), key_(splitmix64(splitmix64(options.seed) ^ splitmix64(stream + 0x5eed))) {
  check_sampling_options(options);
}

double TokenSampler::uniform() { return double(splitmix64(key_ + draws_++) >> 11) * 0x1.0p-53; }

int32_t TokenSampler::next(const float* logits, int64_t V) {
  if (options_.temperature == 0) return int32_t(std::max_element(logits, logits + V) - logits);
  const int64_t k = options_.top_k > 0 ? std::min(options_.top_k, V) : V;
  const bool narrowed = k < V || options_.top_p < 1;
  // Candidates in the order the draw walks them: by id when every token is kept (no sort on the
  // per-token path), else most likely first, equal logits by id, so the order never depends on the sort.
  order_.resize(size_t(V));
  std::iota(order_.begin(), order_.end(), 0);
  if (narrowed) {
    auto more_likely = [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), more_likely);
  }
  // Softmax of logits / temperature over the k candidates, in double.
  probs_.resize(size_t(k));
  const double top = *std::max_element(logits, logits + V);
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) sum += probs_[i] = std::exp((double(logits[order_[i]]) - top) / options_.temperature);
  // Nucleus: the shortest prefix whose probability reaches top_p (at least one token).
  int64_t kept = k;
  if (options_.top_p < 1) {
    double mass = 0;
    for (kept = 0; kept < k;) {
      mass += probs_[kept++] / sum;
      if (mass >= options_.top_p) break;
    }
  }
  double kept_sum = 0;
  for (int64_t i = 0; i < kept; ++i) kept_sum += probs_[i];
  const double u = uniform() * kept_sum;
  double cumulative = 0;
  for (int64_t i = 0; i < kept; ++i) {
    cumulative += probs_[i];
    if (u < cumulative) return order_[i];
  }
  return order_[kept - 1];  // u within rounding of kept_sum
}

}  // namespace trident
