#pragma once
// Random model inputs shared by the model-level test suites (invariants, GPU vs CPU).
#include <cstdint>
#include <random>
#include <vector>

#include "model/parameters.hpp"

namespace trident::test {

inline std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, int32_t(vocab - 1));
  std::vector<int32_t> v(n);
  for (auto& t : v) t = dist(gen);
  return v;
}

// GPT-2 parameters from the seeded init (std), with LayerNorm weights and biases and the linear
// biases moved off 1 and 0 by normal noise of `offset_std`, so that their gradients matter.
inline std::vector<float> random_params(const ParameterLayout& layout, double std, uint64_t seed,
                                        float offset_std) {
  std::vector<float> host(layout.total());
  init_parameters(layout, std, seed, host.data());
  std::mt19937 gen{uint32_t(seed)};
  std::normal_distribution<float> n(0.f, offset_std);
  for (const auto& t : layout.tensors())
    if (t.kind == ParamKind::Bias || t.kind == ParamKind::NormBias || t.kind == ParamKind::NormWeight)
      for (int64_t i = 0; i < t.numel; ++i) host[t.offset + i] += n(gen);
  return host;
}

}  // namespace trident::test
