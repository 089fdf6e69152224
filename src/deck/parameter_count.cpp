#include "deck/config.hpp"

namespace trident {

int64_t parameter_count(const ModelConfig& m) {
  const int64_t C = m.hidden, F = m.ffn_hidden > 0 ? m.ffn_hidden : 4 * m.hidden;
  const int64_t per_layer = 2 * C                 // ln_1
                            + C * 3 * C + 3 * C   // c_attn
                            + C * C + C           // attn.c_proj
                            + 2 * C               // ln_2
                            + C * F + F           // mlp.c_fc
                            + F * C + C;          // mlp.c_proj
  const int64_t embeddings = m.vocab_size * C + m.seq_len * C;
  const int64_t head = m.tie_embeddings ? 0 : m.vocab_size * C;
  return embeddings + m.layers * per_layer + 2 * C /* ln_f */ + head;
}

}  // namespace trident
