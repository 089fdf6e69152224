#include "distributed/grad_reducer.hpp"

#include <algorithm>
#include <chrono>

#include "core/error.hpp"
#include "distributed/zero_partition.hpp"

namespace trident {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

GradientReducer::GradientReducer(Group& dp, Kernels& kernels, std::vector<GptModel*> chunks,
                                 std::vector<int64_t> deferred, Options options)
    : dp_(dp), k_(kernels), opt_(options) {
  TRIDENT_CHECK(deferred.size() == chunks.size(), "GradientReducer: one deferred range per chunk");
  TRIDENT_CHECK(opt_.bucket_elements > 0 && opt_.micro_batches > 0, "GradientReducer: bad options");
  for (size_t i = 0; i < chunks.size(); ++i) {
    Chunk c;
    c.model = chunks[i];
    c.deferred = deferred[i];
    const int64_t total = c.model->layout().total();
    c.bounds = opt_.zero > 0 ? partition_flat(total, dp_.size()) : std::vector<int64_t>{0, total};
    for (int64_t end = total; end > c.deferred; end -= opt_.bucket_elements)
      c.buckets.push_back(Bucket{std::max(c.deferred, end - opt_.bucket_elements), end, false, {}});
    chunks_.push_back(std::move(c));
  }
  for (auto& c : chunks_) {
    Chunk* chunk = &c;
    c.model->set_gradient_hooks({[this, chunk](int64_t b, int64_t e) { writing(*chunk, b, e); },
                                 [this, chunk](int64_t from) { final_from(*chunk, from); }});
  }
}

GradientReducer::~GradientReducer() {
  for (auto& c : chunks_) c.model->set_gradient_hooks({});
}

void GradientReducer::start_step() {
  exposed_s_ = 0;
  reduced_bytes_ = 0;
  for (auto& c : chunks_) {
    c.backwards_done = 0;
    // Every bucket is reduced once per step, even one no micro-batch wrote (its sum is zero).
    for (auto& b : c.buckets) b.dirty = true;
  }
}

void GradientReducer::writing(Chunk& c, int64_t begin, int64_t end) {
  for (auto& b : c.buckets) {
    if (b.end <= begin || b.begin >= end) continue;
    if (!b.requests.empty()) {
      // Only ZeRO-2 reduces a bucket before the last micro-batch; an all-reduce already started
      // would be summed twice if written again.
      TRIDENT_CHECK(opt_.zero == 2, "internal: gradients [{}, {}) written after their all-reduce started", begin, end);
      complete(c, b);
    }
    b.dirty = true;
  }
}

void GradientReducer::final_from(Chunk& c, int64_t from) {
  const bool reducing = opt_.zero == 2 || c.backwards_done == opt_.micro_batches - 1;
  if (reducing && (opt_.overlap || from == 0))
    for (auto& b : c.buckets)
      if (b.dirty && b.requests.empty() && b.begin >= from) launch(c, b);
  if (from == 0) {
    ++c.backwards_done;
    // Without overlap, this micro-batch's reduction is waited for here, before anything else runs.
    if (reducing && !opt_.overlap)
      for (auto& b : c.buckets)
        if (!b.requests.empty()) complete(c, b);
  }
  progress(c);
}

void GradientReducer::launch(Chunk& c, Bucket& b) {
  float* g = c.model->grads();
  b.dirty = false;
  reduced_bytes_ += (b.end - b.begin) * int64_t(sizeof(float));
  if (opt_.zero < 2) {
    b.requests.push_back(dp_.iall_reduce(g + b.begin, b.end - b.begin));
    return;
  }
  // One reduce per owner whose range the bucket overlaps (usually one, two at a range boundary).
  for (int r = 0; r < dp_.size(); ++r) {
    const int64_t first = std::max(b.begin, c.bounds[size_t(r)]), last = std::min(b.end, c.bounds[size_t(r) + 1]);
    if (first < last) b.requests.push_back(dp_.ireduce(g + first, last - first, r));
  }
}

void GradientReducer::complete(Chunk& c, Bucket& b) {
  const auto t0 = std::chrono::steady_clock::now();
  dp_.wait_all(b.requests);
  b.requests.clear();
  exposed_s_ += seconds_since(t0);
  if (opt_.zero < 2) return;
  const int64_t mine0 = c.bounds[size_t(owner_range())], mine1 = c.bounds[size_t(owner_range()) + 1];
  float* g = c.model->grads();
  if (b.begin < std::min(b.end, mine0)) k_.fill(g + b.begin, 0.f, std::min(b.end, mine0) - b.begin);
  if (std::max(b.begin, mine1) < b.end) k_.fill(g + std::max(b.begin, mine1), 0.f, b.end - std::max(b.begin, mine1));
}

void GradientReducer::progress(Chunk& c) {
  // One MPI_Test moves every outstanding operation of the process along; testing the oldest
  // unfinished request is enough.
  for (auto& b : c.buckets)
    for (auto& r : b.requests)
      if (r.mpi != MPI_REQUEST_NULL) {
        dp_.test(r);
        return;
      }
}

void GradientReducer::finish_backward() {
  for (auto& c : chunks_) {
    for (auto& b : c.buckets)
      if (b.dirty && b.requests.empty()) launch(c, b);
    for (auto& b : c.buckets)
      if (!b.requests.empty()) complete(c, b);
  }
}

void GradientReducer::reduce_deferred() {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Request> pending;
  for (auto& c : chunks_)
    for (int64_t begin = 0; begin < c.deferred; begin += opt_.bucket_elements) {
      const int64_t n = std::min(opt_.bucket_elements, c.deferred - begin);
      pending.push_back(dp_.iall_reduce(c.model->grads() + begin, n));
      reduced_bytes_ += n * int64_t(sizeof(float));
    }
  dp_.wait_all(pending);
  exposed_s_ += seconds_since(t0);
}

void GradientReducer::gather_parameters() {
  if (opt_.zero == 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Request> pending;
  for (auto& c : chunks_)
    for (int r = 0; r < dp_.size(); ++r)
      for (int64_t begin = c.bounds[size_t(r)]; begin < c.bounds[size_t(r) + 1]; begin += opt_.bucket_elements)
        pending.push_back(dp_.ibroadcast(c.model->params() + begin,
                                         std::min(opt_.bucket_elements, c.bounds[size_t(r) + 1] - begin), r));
  dp_.wait_all(pending);
  exposed_s_ += seconds_since(t0);
}

}  // namespace trident
