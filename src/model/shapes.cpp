#include "model/shapes.hpp"

#include <algorithm>
#include <numeric>

namespace trident {

GptShapes GptShapes::from(const ModelConfig& m, int tp) {
  GptShapes s;
  s.V = m.vocab_size;
  const int64_t multiple = std::lcm<int64_t>(m.vocab_pad_to, tp);
  s.Vp = (m.vocab_size + multiple - 1) / multiple * multiple;
  s.T = m.seq_len;
  s.L = m.layers;
  s.C = m.hidden;
  s.NH = m.heads;
  s.KVH = m.kv();
  s.HD = m.hidden / m.heads;
  s.F = m.ffn();
  s.tied = m.tie_embeddings;
  s.arch = m.architecture;
  s.rmsnorm = m.norm == Norm::RmsNorm;
  s.norm_eps = float(m.norm_eps);
  s.rope = m.positions == Positions::Rope;
  s.rope_theta = m.rope_theta;
  s.swiglu = m.mlp == Mlp::SwiGlu;
  s.bias = m.bias;
  return s;
}

int64_t logits_chunk_rows(int64_t chunk_bytes, int64_t vocab_rows, int64_t positions) {
  if (chunk_bytes <= 0) return positions;
  return std::clamp<int64_t>(chunk_bytes / (vocab_rows * int64_t(sizeof(float))), 1, positions);
}

}  // namespace trident
