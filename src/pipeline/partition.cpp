#include "pipeline/partition.hpp"

#include <algorithm>
#include <limits>

#include "core/error.hpp"

namespace trident {

std::vector<int64_t> partition_layers(const Config& cfg) {
  const int64_t chunks = int64_t(cfg.mesh.pp) * cfg.mesh.virtual_stages;
  if (!cfg.mesh.layers_per_stage.empty()) return cfg.mesh.layers_per_stage;
  const int64_t L = cfg.model.layers, C = cfg.model.hidden, T = cfg.model.seq_len, V = cfg.model.vocab_size;
  TRIDENT_CHECK(L >= chunks, "{} layers cannot fill {} pipeline chunks", L, chunks);
  const double layer = 24.0 * C * C + 4.0 * T * C;
  const double head = 2.0 * C * V;
  // best[k][l]: smallest possible maximum chunk cost when the first k chunks hold the first l layers.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(chunks + 1, std::vector<double>(L + 1, inf));
  std::vector<std::vector<int64_t>> cut(chunks + 1, std::vector<int64_t>(L + 1, 0));
  best[0][0] = 0;
  for (int64_t k = 1; k <= chunks; ++k)
    for (int64_t l = k; l <= L - (chunks - k); ++l)
      for (int64_t j = k - 1; j < l; ++j) {
        const double cost = (l - j) * layer + (k == chunks ? head : 0.0);
        const double worst = std::max(best[k - 1][j], cost);
        if (worst < best[k][l]) best[k][l] = worst, cut[k][l] = j;
      }
  std::vector<int64_t> sizes(chunks);
  for (int64_t k = chunks, l = L; k > 0; --k) {
    sizes[k - 1] = l - cut[k][l];
    l = cut[k][l];
  }
  return sizes;
}

ChunkSpec chunk_spec(const std::vector<int64_t>& sizes, int64_t g) {
  ChunkSpec c;
  c.layer_begin = 0;
  for (int64_t i = 0; i < g; ++i) c.layer_begin += sizes[i];
  c.layer_end = c.layer_begin + sizes[g];
  c.embedding = g == 0;
  c.head = g == int64_t(sizes.size()) - 1;
  return c;
}

}  // namespace trident
