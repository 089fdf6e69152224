#include "model/shapes.hpp"

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
  s.HD = m.hidden / m.heads;
  s.F = m.ffn_hidden > 0 ? m.ffn_hidden : 4 * m.hidden;
  s.tied = m.tie_embeddings;
  return s;
}

}  // namespace trident
