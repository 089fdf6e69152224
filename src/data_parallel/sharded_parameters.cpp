#include "data_parallel/sharded_parameters.hpp"

#include <algorithm>
#include <chrono>

#include "core/bf16.hpp"
#include "core/error.hpp"
#include "data_parallel/range_gather.hpp"

namespace trident {

ShardedParameters::ShardedParameters(Group& dp, Kernels& kernels, std::vector<GptModel*> chunks,
                                     std::vector<std::vector<int64_t>> bounds, bool bf16)
    : dp_(dp), k_(kernels), bf16_(bf16), pool_(kernels, bf16) {
  TRIDENT_CHECK(chunks.size() == bounds.size(), "ShardedParameters: one range set per chunk");
  chunks_.reserve(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    Chunk& c = chunks_.emplace_back(chunks[i]);
    c.bounds = std::move(bounds[i]);
    TRIDENT_CHECK(c.bounds.size() == size_t(dp_.size()) + 1, "ShardedParameters: {} ranges for dp {}",
                  c.bounds.size() - 1, dp_.size());
    c.mine0 = c.bounds[size_t(dp_.rank())];
    c.mine1 = c.bounds[size_t(dp_.rank()) + 1];
    c.partition = k_.alloc(std::max<int64_t>(c.mine1 - c.mine0, 1));
    c.source = std::make_unique<Source>(*this, int(i));
    c.model->set_parameter_source(c.source.get());
  }
}

ShardedParameters::~ShardedParameters() {
  for (auto& c : chunks_) {
    for (auto& g : c.gathered) dp_.wait_all(g.requests);
    k_.free(c.partition);
  }
}

int64_t ShardedParameters::bytes() const {
  int64_t partitions = 0;
  for (const auto& c : chunks_) partitions += c.mine1 - c.mine0;
  return partitions * int64_t(sizeof(float)) + pool_.bytes();
}

double ShardedParameters::take_wait_s() {
  const double s = wait_s_;
  wait_s_ = 0;
  return s;
}

ShardedParameters::Gathered& ShardedParameters::start_gather(Chunk& chunk, int64_t begin, int64_t end) {
  Gathered g{begin, end, pool_.take(end - begin), {}, false};
  const int64_t first = std::max(begin, chunk.mine0), last = std::min(end, chunk.mine1);
  const float* mine = chunk.partition + (first - chunk.mine0);
  if (first < last && bf16_) k_.pack_bf16(mine, g.buffer->wire + (first - begin), last - first);
  if (first < last && !bf16_) k_.copy(g.buffer->data + (first - begin), mine, last - first);
  for (int r = 0; r < dp_.size(); ++r) {
    const int64_t a = std::max(begin, chunk.bounds[size_t(r)]), b = std::min(end, chunk.bounds[size_t(r) + 1]);
    if (a >= b) continue;
    if (!bf16_) {
      g.requests.push_back(dp_.ibroadcast(g.buffer->data + (a - begin), b - a, r));
      continue;
    }
    g.requests.push_back(dp_.ibroadcast(reinterpret_cast<Bf16*>(g.buffer->wire + (a - begin)), b - a, r));
    // The tensors kept in fp32 move in fp32, straight into their places (the wire's patterns of them go
    // unread).
    chunk.fp32_tensors.split(a, b, [&](int64_t p, int64_t q, bool fp32) {
      if (!fp32) return;
      if (r == dp_.rank()) k_.copy(g.buffer->data + (p - begin), chunk.partition + (p - chunk.mine0), q - p);
      g.requests.push_back(dp_.ibroadcast(g.buffer->data + (p - begin), q - p, r));
    });
  }
  chunk.gathered.push_back(std::move(g));
  return chunk.gathered.back();
}

void ShardedParameters::prefetch(int c, int64_t begin, int64_t end) {
  Chunk& chunk = chunks_[size_t(c)];
  for (const auto& g : chunk.gathered)
    if (g.begin == begin) return;
  start_gather(chunk, begin, end);
}

const float* ShardedParameters::acquire(int c, int64_t begin, int64_t end) {
  Chunk& chunk = chunks_[size_t(c)];
  Gathered* g = nullptr;
  for (auto& x : chunk.gathered)
    if (x.begin == begin) g = &x;
  if (!g) g = &start_gather(chunk, begin, end);
  TRIDENT_CHECK(g->end == end && !g->acquired, "internal: parameters [{}, {}) acquired twice", begin, end);
  const auto t0 = std::chrono::steady_clock::now();
  dp_.wait_all(g->requests);
  g->requests.clear();
  if (bf16_)
    chunk.fp32_tensors.split(begin, end, [&](int64_t p, int64_t q, bool fp32) {
      if (!fp32) k_.unpack_bf16(g->buffer->data + (p - begin), g->buffer->wire + (p - begin), q - p);
    });
  wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  g->acquired = true;
  return g->buffer->data;
}

void ShardedParameters::release(int c, int64_t begin, int64_t end) {
  Chunk& chunk = chunks_[size_t(c)];
  const auto it = std::find_if(chunk.gathered.begin(), chunk.gathered.end(),
                               [&](const Gathered& g) { return g.begin == begin && g.acquired; });
  TRIDENT_CHECK(it != chunk.gathered.end(), "internal: releasing parameters [{}, {}) not acquired", begin, end);
  ParameterBufferPool::give_back(it->buffer);
  chunk.gathered.erase(it);
}

void ShardedParameters::check_released() const {
  for (const auto& c : chunks_)
    for (const auto& g : c.gathered)
      TRIDENT_CHECK(false, "internal: gathered parameters [{}, {}) still held at the end of a step", g.begin, g.end);
}

void ShardedParameters::gather_whole(int c, float* host) {
  const Chunk& chunk = chunks_[size_t(c)];
  gather_ranges_to_host(dp_, k_, chunk.partition, chunk.bounds, host);
}

}  // namespace trident
