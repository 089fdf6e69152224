#include "model/flops.hpp"

#include "model/shapes.hpp"

namespace trident {

double layer_forward_flops(const ModelConfig& m, double tokens) {
  const GptShapes s = GptShapes::from(m);
  const double C = double(s.C), F = double(s.F), T = double(s.T), KV = double(s.KVH * s.HD);
  const double mlp_matrices = s.swiglu ? 3 : 2;  // gate, up, down; or c_fc, c_proj
  return tokens * (2 * C * (C + 2 * KV) + 2 * C * C + 2 * mlp_matrices * C * F + 2 * T * C);  // attention: causal, half of 4TC
}

double model_flops_per_token(const ModelConfig& m) {
  const double head = 2 * double(m.hidden) * double(m.vocab_size);
  return 3.0 * (double(m.layers) * layer_forward_flops(m, 1.0) + head);
}

}  // namespace trident
