#include "pipeline/partition.hpp"

#include "core/error.hpp"

namespace trident {
namespace {

// The minimax partition when every layer costs `layer` and the last chunk also carries `head`: the
// smallest maximum chunk cost, and among the best partitions the one that gives later chunks more
// layers. Closed form of the dynamic program over (chunks, layers) (O(chunks * layers^2), which
// never finished for 10^6 layers): the first chunks share j layers evenly (cost ceil(j/(chunks-1))
// layers, non-decreasing in j), the last takes L - j (decreasing in j); the best j is where the two
// cross, found by bisection.
std::vector<int64_t> minimax_partition(int64_t L, int64_t chunks, double layer, double head) {
  if (chunks == 1) return {L};
  const int64_t front = chunks - 1;
  const auto front_cost = [&](int64_t j) { return double((j + front - 1) / front) * layer; };
  const auto last_cost = [&](int64_t j) { return double(L - j) * layer + head; };
  // crossing: the smallest j in [front, L-1] with front_cost(j) >= last_cost(j), or L when none.
  int64_t lo = front, hi = L;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (front_cost(mid) >= last_cost(mid)) hi = mid;
    else lo = mid + 1;
  }
  const int64_t crossing = lo;
  // Left of the crossing the last chunk decides (its cost falls with j); from it on, the first chunks.
  int64_t j = crossing;
  if (crossing > front && (crossing == L || last_cost(crossing - 1) <= front_cost(crossing))) j = crossing - 1;
  std::vector<int64_t> sizes(static_cast<size_t>(chunks));
  sizes[size_t(front)] = L - j;
  for (int64_t k = front; k > 0; --k) {
    sizes[size_t(k - 1)] = (j + k - 1) / k;  // later chunks take the rounded-up share
    j -= sizes[size_t(k - 1)];
  }
  return sizes;
}

}  // namespace

std::vector<int64_t> partition_layers(const Config& cfg) {
  const int64_t chunks = int64_t(cfg.mesh.pp) * cfg.mesh.virtual_stages;
  if (!cfg.mesh.layers_per_stage.empty()) return cfg.mesh.layers_per_stage;
  const int64_t L = cfg.model.layers, C = cfg.model.hidden, T = cfg.model.seq_len, V = cfg.model.vocab_size;
  TRIDENT_CHECK(L >= chunks, "{} layers cannot fill {} pipeline chunks", L, chunks);
  const double layer = 24.0 * C * C + 4.0 * T * C;
  const double head = 2.0 * C * V;
  return minimax_partition(L, chunks, layer, head);
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
