#include "core/config.hpp"

#include "core/error.hpp"

namespace trident {

// Exact count in 128-bit arithmetic: deck values are checked one by one, so their products may
// exceed int64 before the deck's size rule rejects them.
std::optional<int64_t> checked_parameter_count(const ModelConfig& m) {
  using Wide = __int128;
  const Wide C = m.hidden, F = m.ffn_hidden > 0 ? m.ffn_hidden : Wide(4) * m.hidden;
  const Wide per_layer = 2 * C                 // ln_1
                         + C * 3 * C + 3 * C   // c_attn
                         + C * C + C           // attn.c_proj
                         + 2 * C               // ln_2
                         + C * F + F           // mlp.c_fc
                         + F * C + C;          // mlp.c_proj
  const Wide embeddings = Wide(m.vocab_size) * C + Wide(m.seq_len) * C;
  const Wide head = m.tie_embeddings ? 0 : Wide(m.vocab_size) * C;
  const Wide total = embeddings + Wide(m.layers) * per_layer + 2 * C /* ln_f */ + head;
  if (total > Wide(INT64_MAX)) return std::nullopt;
  return int64_t(total);
}

int64_t parameter_count(const ModelConfig& m) {
  const auto n = checked_parameter_count(m);
  if (!n) throw Error("the model's parameter count exceeds 2^63 (load_deck rejects such decks)");
  return *n;
}

}  // namespace trident
