#include "core/config.hpp"

#include "core/error.hpp"

namespace trident {

// Exact count in 128-bit arithmetic: deck values are checked one by one, so their products may
// exceed int64 before the deck's size rule rejects them.
std::optional<int64_t> checked_parameter_count(const ModelConfig& m) {
  using Wide = __int128;
  const Wide C = m.hidden, F = m.ffn();
  const Wide kv = C / m.heads * m.kv();  // width of k (and of v)
  const Wide b = m.bias ? 1 : 0;
  const Wide norm = m.norm == Norm::LayerNorm && m.bias ? 2 * C : C;  // weight (and bias)
  const Wide fc = m.mlp == Mlp::SwiGlu ? 2 * F : F;                    // gate and up, or c_fc
  const Wide per_layer = norm                          // attention's norm
                         + C * (C + 2 * kv) + b * (C + 2 * kv)  // q, k, v
                         + C * C + b * C               // attention output
                         + norm                        // MLP's norm
                         + C * fc + b * fc             // c_fc, or gate and up
                         + F * C + b * C;              // MLP output
  const Wide positions = m.positions == Positions::Learned ? Wide(m.seq_len) * C : 0;
  const Wide embeddings = Wide(m.vocab_size) * C + positions;
  const Wide head = m.tie_embeddings ? 0 : Wide(m.vocab_size) * C;
  const Wide total = embeddings + Wide(m.layers) * per_layer + norm /* final norm */ + head;
  if (total > Wide(INT64_MAX)) return std::nullopt;
  return int64_t(total);
}

int64_t parameter_count(const ModelConfig& m) {
  const auto n = checked_parameter_count(m);
  if (!n) throw Error("the model's parameter count exceeds 2^63 (load_deck rejects such decks)");
  return *n;
}

}  // namespace trident
