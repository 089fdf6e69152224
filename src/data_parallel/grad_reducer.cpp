#include "data_parallel/grad_reducer.hpp"

#include <algorithm>
#include <chrono>

#include "core/bf16.hpp"
#include "core/error.hpp"
#include "data_parallel/range_gather.hpp"
#include "data_parallel/zero_partition.hpp"

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
  std::vector<std::vector<int64_t>> bounds;
  for (size_t i = 0; i < chunks.size(); ++i) {
    Chunk c;
    c.model = chunks[i];
    c.deferred = deferred[i];
    const int64_t total = c.model->layout().total();
    c.bounds = opt_.zero > 0 ? partition_flat(total, dp_.size()) : std::vector<int64_t>{0, total};
    bounds.push_back(c.bounds);
    if (opt_.zero < 2)
      for (int64_t end = total; end > c.deferred; end -= opt_.bucket_elements)
        c.buckets.push_back(Bucket{std::max(c.deferred, end - opt_.bucket_elements), end, false, {}});
    if (opt_.bf16 && opt_.zero < 2) c.wire = k_.alloc_bf16(total);
    chunks_.push_back(std::move(c));
  }
  TRIDENT_CHECK(!opt_.bf16_parameters || opt_.zero >= 3 || opt_.working_copy,
                "internal: a bf16 working copy below ZeRO-3 needs its patterns");
  if (opt_.zero >= 2) {
    sharded_ = std::make_unique<ShardedGradients>(dp_, k_, chunks, bounds, deferred, !opt_.overlap, opt_.bf16);
    if (opt_.zero == 3)
      sharded_params_ = std::make_unique<ShardedParameters>(dp_, k_, chunks, bounds, opt_.bf16_parameters);
    return;
  }
  for (auto& c : chunks_) {
    Chunk* chunk = &c;
    c.model->set_gradient_hooks({[this, chunk](int64_t b, int64_t e) { writing(*chunk, b, e); },
                                 [this, chunk](int64_t from) { final_from(*chunk, from); }});
  }
}

GradientReducer::~GradientReducer() {
  if (!sharded_)
    for (auto& c : chunks_) c.model->set_gradient_hooks({});
  for (auto& c : chunks_)
    if (c.wire) k_.free(c.wire);
}

float* GradientReducer::range_gradients(int c) {
  if (sharded_) return sharded_->partition(c);
  return chunks_[size_t(c)].model->grads() + shard_begin(c);
}

float* GradientReducer::deferred_gradients(int c) {
  if (sharded_) return sharded_->deferred(c);
  return chunks_[size_t(c)].model->grads();
}

int64_t GradientReducer::gradient_bytes() const {
  if (sharded_) return sharded_->bytes();
  int64_t n = 0;
  for (const auto& c : chunks_) n += c.model->layout().total();
  return n * int64_t(sizeof(float) + (opt_.bf16 ? sizeof(uint16_t) : 0));  // (bf16: and their patterns)
}

float* GradientReducer::range_parameters(int c) {
  if (sharded_params_) return sharded_params_->partition(c);
  TRIDENT_CHECK(!opt_.working_copy, "internal: a bf16 working copy's fp32 parameters are its optimizer's masters");
  return chunks_[size_t(c)].model->params() + shard_begin(c);
}

int64_t GradientReducer::parameter_bytes() const {
  if (sharded_params_) return sharded_params_->bytes();
  if (opt_.working_copy) return 0;
  int64_t n = 0;
  for (const auto& c : chunks_) n += c.model->layout().total();
  return n * int64_t(sizeof(float));
}

void GradientReducer::whole_parameters(int c, float* host) {
  if (sharded_params_) return sharded_params_->gather_whole(c, host);
  GptModel& model = *chunks_[size_t(c)].model;
  TRIDENT_CHECK(!opt_.working_copy, "internal: a bf16 working copy's fp32 parameters are its optimizer's masters");
  k_.copy_to_host(host, model.params(), model.layout().total());
}

void GradientReducer::whole_from_ranges(int c, const float* range_values, float* host) {
  gather_ranges_to_host(dp_, k_, range_values, chunks_[size_t(c)].bounds, host);
}

void GradientReducer::start_step() {
  exposed_s_ = 0;
  reduced_bytes_ = 0;
  if (sharded_params_) sharded_params_->take_wait_s();  // validation's gathers are not the step's
  if (sharded_) {
    sharded_->reset_counters();
    sharded_->start_step();
    return;
  }
  for (auto& c : chunks_) {
    c.backwards_done = 0;
    // Every bucket is reduced once per step, even one no micro-batch wrote (its sum is zero).
    for (auto& b : c.buckets) b.dirty = true;
  }
}

void GradientReducer::writing(Chunk& c, int64_t begin, int64_t end) {
  for (auto& b : c.buckets) {
    if (b.end <= begin || b.begin >= end) continue;
    // An all-reduce already started would be summed twice if its range were written again.
    TRIDENT_CHECK(b.requests.empty(), "internal: gradients [{}, {}) written after their all-reduce started", begin, end);
    b.dirty = true;
  }
}

void GradientReducer::final_from(Chunk& c, int64_t from) {
  const bool reducing = c.backwards_done == opt_.micro_batches - 1;
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

Request GradientReducer::start_reduction(Chunk& c, int64_t begin, int64_t n) {
  float* grads = c.model->grads() + begin;
  if (!opt_.bf16) {
    reduced_bytes_ += n * int64_t(sizeof(float));
    return dp_.iall_reduce(grads, n);
  }
  reduced_bytes_ += n * int64_t(sizeof(uint16_t));
  k_.pack_bf16(grads, c.wire + begin, n);
  return dp_.iall_reduce(reinterpret_cast<Bf16*>(c.wire + begin), n);
}

void GradientReducer::take_reduction(Chunk& c, int64_t begin, int64_t n) {
  if (opt_.bf16) k_.unpack_bf16(c.model->grads() + begin, c.wire + begin, n);
}

void GradientReducer::launch(Chunk& c, Bucket& b) {
  b.dirty = false;
  b.requests.push_back(start_reduction(c, b.begin, b.end - b.begin));
}

void GradientReducer::complete(Chunk& c, Bucket& b) {
  const auto t0 = std::chrono::steady_clock::now();
  dp_.wait_all(b.requests);
  b.requests.clear();
  take_reduction(c, b.begin, b.end - b.begin);
  exposed_s_ += seconds_since(t0);
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
  if (sharded_) {
    sharded_->finish_backward();
    exposed_s_ += sharded_->exposed_s();
    reduced_bytes_ += sharded_->reduced_bytes();
    sharded_->reset_counters();
    return;
  }
  for (auto& c : chunks_) {
    for (auto& b : c.buckets)
      if (b.dirty && b.requests.empty()) launch(c, b);
    for (auto& b : c.buckets)
      if (!b.requests.empty()) complete(c, b);
  }
}

void GradientReducer::reduce_deferred() {
  if (sharded_) {
    sharded_->reduce_deferred(opt_.bucket_elements);
    exposed_s_ += sharded_->exposed_s();
    reduced_bytes_ += sharded_->reduced_bytes();
    sharded_->reset_counters();
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Request> pending;
  for (auto& c : chunks_)
    for (int64_t begin = 0; begin < c.deferred; begin += opt_.bucket_elements)
      pending.push_back(start_reduction(c, begin, std::min(opt_.bucket_elements, c.deferred - begin)));
  dp_.wait_all(pending);
  for (auto& c : chunks_)
    if (c.deferred > 0) take_reduction(c, 0, c.deferred);
  exposed_s_ += seconds_since(t0);
}

void GradientReducer::gather_parameters() {
  if (sharded_params_) {
    sharded_params_->check_released();
    exposed_s_ += sharded_params_->take_wait_s();  // the step's gather waits, not hidden by compute
    return;
  }
  if (opt_.zero == 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Request> pending;
  for (size_t i = 0; i < chunks_.size(); ++i) {
    const std::vector<int64_t>& bounds = chunks_[i].bounds;
    if (!opt_.working_copy) {
      broadcast_ranges(bounds, chunks_[i].model->params(), pending);
      continue;
    }
    // The copy's patterns, and its fp32 tensors: each range's are packed in one range of their own.
    Bf16WorkingCopy& copy = *opt_.working_copy;
    broadcast_ranges(bounds, reinterpret_cast<Bf16*>(copy.patterns(int(i))), pending);
    std::vector<int64_t> packed;
    for (int64_t b : bounds) packed.push_back(copy.fp32_tensors(int(i)).packed_offset(b));
    broadcast_ranges(packed, copy.fp32_values(int(i)), pending);
  }
  dp_.wait_all(pending);
  exposed_s_ += seconds_since(t0);
}

template <class T>
void GradientReducer::broadcast_ranges(const std::vector<int64_t>& bounds, T* values, std::vector<Request>& pending) {
  for (int r = 0; r < dp_.size(); ++r)
    for (int64_t begin = bounds[size_t(r)]; begin < bounds[size_t(r) + 1]; begin += opt_.bucket_elements)
      pending.push_back(dp_.ibroadcast(values + begin, std::min(opt_.bucket_elements, bounds[size_t(r) + 1] - begin), r));
}

}  // namespace trident
