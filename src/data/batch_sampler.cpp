// BatchSampler: (global step, sample j) -> window of seq_len + 1 tokens. See dataset.hpp.
#include <algorithm>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>

#include "core/error.hpp"
#include "core/splitmix64.hpp"
#include "data/dataset.hpp"

namespace trident {
namespace {

__extension__ typedef unsigned __int128 u128;

// Uniform integer in [0, bound) from raw 64-bit outputs (Lemire, "Fast random integer generation
// in an interval", 2019): unbiased and identical on every platform.
uint64_t bounded(std::mt19937_64& gen, uint64_t bound) {
  u128 m = static_cast<u128>(gen()) * bound;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < bound) {
    const uint64_t threshold = (0 - bound) % bound;
    while (low < threshold) {
      m = static_cast<u128>(gen()) * bound;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

template <typename T>
void fisher_yates(uint64_t seed, uint64_t epoch, std::vector<T>& p) {
  std::mt19937_64 gen(splitmix64(splitmix64(seed) + epoch));
  const int64_t n = static_cast<int64_t>(p.size());
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = static_cast<T>(i);
  for (int64_t i = n - 1; i >= 1; --i) {
    const uint64_t k = bounded(gen, static_cast<uint64_t>(i) + 1);
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(k)]);
  }
}

// One epoch's permutation, stored compactly (uint32 when the window count allows).
struct Permutation {
  uint64_t epoch = 0;
  std::vector<uint32_t> small;
  std::vector<int64_t> large;
  int64_t at(int64_t i) const {
    return small.empty() && !large.empty() ? large[static_cast<size_t>(i)]
                                           : static_cast<int64_t>(small[static_cast<size_t>(i)]);
  }
};

}  // namespace

std::vector<int64_t> shuffle_permutation(uint64_t seed, uint64_t epoch, int64_t n) {
  TRIDENT_CHECK(n >= 0, "shuffle_permutation: negative size {}", n);
  std::vector<int64_t> p(static_cast<size_t>(n));
  fisher_yates(seed, epoch, p);
  return p;
}

struct BatchSampler::Impl {
  const TokenStream* stream;
  DataOrder order;
  uint64_t seed;
  int64_t seq_len;
  int64_t global_batch;
  int64_t total;
  int64_t windows;  // W

  // The two most recent epochs' permutations: a global batch may straddle an epoch boundary.
  mutable std::mutex mu;
  mutable std::shared_ptr<const Permutation> cache[2];

  std::shared_ptr<const Permutation> permutation(uint64_t epoch) const {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& c : cache) {
      if (c && c->epoch == epoch) return c;
    }
    auto p = std::make_shared<Permutation>();
    p->epoch = epoch;
    if (windows <= static_cast<int64_t>(std::numeric_limits<uint32_t>::max())) {
      p->small.resize(static_cast<size_t>(windows));
      fisher_yates(seed, epoch, p->small);
    } else {
      p->large.resize(static_cast<size_t>(windows));
      fisher_yates(seed, epoch, p->large);
    }
    cache[1] = std::move(cache[0]);
    cache[0] = p;
    return p;
  }

  int64_t window_index(int64_t step, int64_t j) const {
    if (j < 0 || j >= global_batch) {
      throw Error(fmt::format("sample index j = {} is outside [0, global_batch = {})", j, global_batch));
    }
    if (step < 0 || step > (std::numeric_limits<int64_t>::max() - j) / global_batch) {
      throw Error(fmt::format("step {} is outside the range the sampler supports (0 .. {})", step,
                              std::numeric_limits<int64_t>::max() / global_batch - 1));
    }
    return step * global_batch + j;
  }

  int64_t start(int64_t step, int64_t j) const {
    const int64_t w = window_index(step, j);
    if (order == DataOrder::Sequential) {
      const u128 t = static_cast<u128>(w) * static_cast<u128>(seq_len);
      return static_cast<int64_t>(t % static_cast<u128>(total));
    }
    const int64_t e = w / windows;
    const int64_t i = w % windows;
    return permutation(static_cast<uint64_t>(e))->at(i) * seq_len;
  }

  // count tokens from `begin`, continuing from token 0 past the end (count <= total).
  void read_wrapped(int64_t begin, int64_t count, int32_t* out) const {
    const int64_t first = std::min(count, total - begin);
    stream->read(begin, first, out);
    if (first < count) stream->read(0, count - first, out + first);
  }
};

BatchSampler::BatchSampler(const TokenStream& stream, DataOrder order, uint64_t seed, int64_t seq_len,
                           int64_t global_batch)
    : impl_(std::make_unique<Impl>()) {
  if (seq_len < 1) throw Error(fmt::format("seq_len must be >= 1, got {}", seq_len));
  if (global_batch < 1) throw Error(fmt::format("global_batch must be >= 1, got {}", global_batch));
  const int64_t total = stream.size();
  if (total < seq_len + 1) {
    throw Error(fmt::format("the data {} holds {} tokens, fewer than one window of seq_len + 1 = {} tokens",
                            stream.describe(), total, seq_len + 1));
  }
  Impl& m = *impl_;
  m.stream = &stream;
  m.order = order;
  m.seed = seed;
  m.seq_len = seq_len;
  m.global_batch = global_batch;
  m.total = total;
  m.windows = (total - 1) / seq_len;
}

BatchSampler::~BatchSampler() = default;
BatchSampler::BatchSampler(BatchSampler&&) noexcept = default;
BatchSampler& BatchSampler::operator=(BatchSampler&&) noexcept = default;

void BatchSampler::sample(int64_t step, int64_t j, int32_t* inputs, int32_t* targets) const {
  const Impl& m = *impl_;
  const int64_t begin = m.start(step, j);
  const int64_t L = m.seq_len;
  // inputs = window[0, L), targets = window[1, L + 1).
  m.read_wrapped(begin, L, inputs);
  std::memcpy(targets, inputs + 1, static_cast<size_t>(L - 1) * sizeof(int32_t));
  m.read_wrapped((begin + L) % m.total, 1, targets + L - 1);
}

int64_t BatchSampler::window_start(int64_t step, int64_t j) const { return impl_->start(step, j); }
int64_t BatchSampler::windows_per_epoch() const { return impl_->windows; }
int64_t BatchSampler::seq_len() const { return impl_->seq_len; }
int64_t BatchSampler::global_batch() const { return impl_->global_batch; }
DataOrder BatchSampler::order() const { return impl_->order; }

}  // namespace trident
