#include "data_parallel/sharded_gradients.hpp"

#include <algorithm>
#include <chrono>

#include "core/bf16.hpp"
#include "core/error.hpp"

namespace trident {

// The GradientSink of one chunk.
class ShardedGradients::Sink : public GradientSink {
 public:
  Sink(ShardedGradients& owner, int chunk) : owner_(owner), chunk_(chunk) {}
  float* open(int64_t begin, int64_t end) override { return owner_.open(chunk_, begin, end); }
  void close(int64_t begin, int64_t end) override { owner_.close(chunk_, begin, end); }

 private:
  ShardedGradients& owner_;
  int chunk_;
};

ShardedGradients::ShardedGradients(Group& dp, Kernels& kernels, std::vector<GptModel*> chunks,
                                   std::vector<std::vector<int64_t>> bounds, std::vector<int64_t> deferred,
                                   bool wait_at_close, bool bf16)
    : dp_(dp), k_(kernels), wait_at_close_(wait_at_close), bf16_(bf16) {
  TRIDENT_CHECK(chunks.size() == bounds.size() && chunks.size() == deferred.size(),
                "ShardedGradients: one range set and deferred size per chunk");
  chunks_.resize(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    Chunk& c = chunks_[i];
    c.model = chunks[i];
    c.bounds = std::move(bounds[i]);
    TRIDENT_CHECK(c.bounds.size() == size_t(dp_.size()) + 1, "ShardedGradients: {} ranges for dp {}",
                  c.bounds.size() - 1, dp_.size());
    c.mine0 = c.bounds[size_t(dp_.rank())];
    c.mine1 = c.bounds[size_t(dp_.rank()) + 1];
    c.deferred = deferred[i];
    c.partition = k_.alloc(std::max<int64_t>(c.mine1 - c.mine0, 1));
    if (c.deferred > 0) c.deferred_buffer = k_.alloc(c.deferred);
    if (c.deferred > 0 && bf16_) c.deferred_wire = k_.alloc_bf16(c.deferred);
    c.sink = std::make_unique<Sink>(*this, int(i));
    c.model->set_gradient_sink(c.sink.get());
  }
}

ShardedGradients::~ShardedGradients() {
  for (auto& s : in_flight_) dp_.wait_all(s.requests);
  for (auto& c : chunks_) {
    k_.free(c.partition);
    if (c.deferred_buffer) k_.free(c.deferred_buffer);
    if (c.deferred_wire) k_.free(c.deferred_wire);
  }
  for (auto& s : pool_) {
    k_.free(s.data);
    if (s.wire) k_.free(s.wire);
  }
}

int64_t ShardedGradients::bytes() const {
  int64_t partitions = 0, wired = 0;  // (wired: with bf16, each has its bf16 companion)
  for (const auto& c : chunks_) partitions += c.mine1 - c.mine0, wired += c.deferred;
  for (const auto& s : pool_) wired += s.capacity;
  return partitions * int64_t(sizeof(float)) + wired * int64_t(sizeof(float) + (bf16_ ? sizeof(uint16_t) : 0));
}

void ShardedGradients::start_step() {
  TRIDENT_CHECK(in_flight_.empty(), "internal: gradient reductions still in flight at the start of a step");
  for (auto& c : chunks_) {
    k_.fill(c.partition, 0.f, c.mine1 - c.mine0);
    if (c.deferred_buffer) k_.fill(c.deferred_buffer, 0.f, c.deferred);
  }
}

float* ShardedGradients::open(int c, int64_t begin, int64_t end) {
  Chunk& chunk = chunks_[size_t(c)];
  if (end <= chunk.deferred) return chunk.deferred_buffer + begin;  // accumulates in place
  TRIDENT_CHECK(begin >= chunk.deferred, "internal: segment [{}, {}) straddles the deferred range [0, {})", begin, end,
                chunk.deferred);
  while (int(in_flight_.size()) >= kMaxInFlight) {
    complete(in_flight_.front());
    in_flight_.pop_front();
  }
  Staging* s = take_staging(end - begin);
  k_.fill(s->data, 0.f, end - begin);
  chunk.open.emplace_back(begin, s);
  progress();
  return s->data;
}

// The smallest free buffer that fits; while none does, the oldest reduction in flight is completed
// (freeing its buffer) before a new buffer is allocated, so the pool grows only to what the open
// segments and kMaxInFlight reductions need at once.
ShardedGradients::Staging* ShardedGradients::take_staging(int64_t n) {
  for (;;) {
    Staging* best = nullptr;
    for (auto& s : pool_)
      if (!s.busy && s.capacity >= n && (!best || s.capacity < best->capacity)) best = &s;
    if (best) {
      best->busy = true;
      return best;
    }
    if (in_flight_.empty()) break;
    complete(in_flight_.front());
    in_flight_.pop_front();
  }
  pool_.push_back(Staging{k_.alloc(n), bf16_ ? k_.alloc_bf16(n) : nullptr, n, true});
  return &pool_.back();
}

void ShardedGradients::close(int c, int64_t begin, int64_t end) {
  Chunk& chunk = chunks_[size_t(c)];
  if (end <= chunk.deferred) return;
  const auto it = std::find_if(chunk.open.begin(), chunk.open.end(), [&](const auto& o) { return o.first == begin; });
  TRIDENT_CHECK(it != chunk.open.end(), "internal: closing segment [{}, {}) that is not open", begin, end);
  Segment seg{c, begin, end, it->second, {}};
  chunk.open.erase(it);
  reduced_bytes_ += (end - begin) * int64_t(bf16_ ? sizeof(uint16_t) : sizeof(float));
  if (bf16_) k_.pack_bf16(seg.staging->data, seg.staging->wire, end - begin);
  for (int r = 0; r < dp_.size(); ++r) {
    const int64_t first = std::max(begin, chunk.bounds[size_t(r)]), last = std::min(end, chunk.bounds[size_t(r) + 1]);
    if (first < last) seg.requests.push_back(start_reduce(*seg.staging, first - begin, last - first, r));
  }
  in_flight_.push_back(std::move(seg));
  if (wait_at_close_) {
    complete(in_flight_.back());
    in_flight_.pop_back();
  }
  progress();
}

Request ShardedGradients::start_reduce(Staging& s, int64_t offset, int64_t n, int root) {
  if (!bf16_) return dp_.ireduce(s.data + offset, n, root);
  return dp_.ireduce(reinterpret_cast<Bf16*>(s.wire + offset), n, root);
}

void ShardedGradients::complete(Segment& s) {
  const auto t0 = std::chrono::steady_clock::now();
  dp_.wait_all(s.requests);
  exposed_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Chunk& c = chunks_[size_t(s.chunk)];
  const int64_t first = std::max(s.begin, c.mine0), last = std::min(s.end, c.mine1);
  if (first < last) {
    float* sum = s.staging->data + (first - s.begin);
    if (bf16_) k_.unpack_bf16(sum, s.staging->wire + (first - s.begin), last - first);
    k_.accumulate(c.partition + (first - c.mine0), sum, last - first);
  }
  s.staging->busy = false;
}

void ShardedGradients::progress() {
  // One MPI_Test moves every outstanding operation of the process along.
  for (auto& s : in_flight_)
    for (auto& r : s.requests)
      if (r.mpi != MPI_REQUEST_NULL) {
        dp_.test(r);
        return;
      }
}

void ShardedGradients::finish_backward() {
  for (auto& s : in_flight_) complete(s);
  in_flight_.clear();
}

void ShardedGradients::reduce_deferred(int64_t piece_elements) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Request> pending;
  for (auto& c : chunks_)
    for (int64_t begin = 0; begin < c.deferred; begin += piece_elements) {
      const int64_t n = std::min(piece_elements, c.deferred - begin);
      if (bf16_) {
        k_.pack_bf16(c.deferred_buffer + begin, c.deferred_wire + begin, n);
        pending.push_back(dp_.iall_reduce(reinterpret_cast<Bf16*>(c.deferred_wire + begin), n));
      } else {
        pending.push_back(dp_.iall_reduce(c.deferred_buffer + begin, n));
      }
      reduced_bytes_ += n * int64_t(bf16_ ? sizeof(uint16_t) : sizeof(float));
    }
  dp_.wait_all(pending);
  exposed_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto& c : chunks_) {
    if (bf16_ && c.deferred > 0) k_.unpack_bf16(c.deferred_buffer, c.deferred_wire, c.deferred);
    const int64_t last = std::min(c.deferred, c.mine1);
    if (c.mine0 < last) k_.copy(c.partition, c.deferred_buffer + c.mine0, last - c.mine0);
  }
}

}  // namespace trident
