#pragma once
// Data parallelism: the DP reduction of the gradients, overlapped with backward, and the ZeRO sharded
// update's parameter gather. One per rank, over its DP group and its chunks.
//
//   zero 0, 1  gradients all-reduced: every rank ends with the whole sum. Buckets are contiguous
//              ranges of a chunk's flat layout, cut from its end (where backward starts). A bucket's
//              non-blocking all-reduce starts during the LAST micro-batch's backward, as soon as
//              backward has finished the bucket (earlier micro-batches only accumulate locally).
//   zero 2     a rank keeps the gradients of its own range only (ShardedGradients): backward writes
//              each micro-batch's gradients segment by segment into reusable staging buffers, each
//              segment is reduced to the rank(s) owning it as soon as it is closed, and the owners
//              add it onto their partitions. There is no whole-chunk gradient buffer.
//   zero 1, 2  each rank's AdamW updates its own range; gather_parameters() then broadcasts every
//              range from its owner (with a bf16 working copy its patterns, in place: half the bytes,
//              and the fp32 values of the tensors it keeps in fp32).
//   zero 3     gradients as zero 2, and a rank keeps the parameters of its own range only
//              (ShardedParameters): forward and backward gather each segment (a layer, the head, an
//              embedding) over DP just before using it, prefetching the next, and drop it after. The
//              update works on the partition and nothing is broadcast after it.
// Elements [0, deferred) of a chunk (a tied embedding whose gradient must first be summed with the
// other pipeline stage's copy) stay out of the buckets and are all-reduced by reduce_deferred().
// A bucket being reduced is never written: before backward writes a range, the reductions of the
// buckets it touches are completed.
//
// Host memory (the CPU backend); progress comes from MPI_Test calls at every backward hook, since
// MPICH progresses non-blocking collectives only inside MPI calls.
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/group.hpp"
#include "data_parallel/sharded_gradients.hpp"
#include "data_parallel/sharded_parameters.hpp"
#include "kernels.hpp"
#include "model/bf16_working_copy.hpp"
#include "model/gpt.hpp"

namespace trident {

class GradientReducer {
 public:
  struct Options {
    int zero = 0;                    // ZeRO stage (0 to 3)
    int64_t bucket_elements = 1 << 22;  // zero 0/1 buckets; every zero: deferred and broadcast pieces
    bool overlap = true;             // false: nothing starts before the micro-batch's backward ends
    int micro_batches = 1;           // per step (backward calls per chunk)
    bool bf16 = false;               // the gradient reductions move bf16 (mesh.grad_reduce_dtype)
    bool bf16_parameters = false;    // a bf16 working copy: the ZeRO broadcast and gathers move bf16
    Bf16WorkingCopy* working_copy = nullptr;  // that copy at zero 0-2 (what the broadcast sends)
  };
  // Installs the gradient hooks on the chunks (removed again by the destructor).
  GradientReducer(Group& dp, Kernels& kernels, std::vector<GptModel*> chunks, std::vector<int64_t> deferred,
                  Options options);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // This rank's ZeRO range of chunk c: what its optimizer updates (the whole layout with zero 0).
  int64_t shard_begin(int c) const { return chunks_[size_t(c)].bounds[size_t(owner_range())]; }
  int64_t shard_end(int c) const { return chunks_[size_t(c)].bounds[size_t(owner_range()) + 1]; }
  int zero() const { return opt_.zero; }
  // Chunk c's reduced gradients of this rank's range (after finish_backward, and reduce_deferred
  // when there is a deferred range): element k is flat element shard_begin(c) + k.
  float* range_gradients(int c);
  // Chunk c's gradients of its deferred elements [0, deferred), before their DP reduction.
  float* deferred_gradients(int c);
  // Bytes of gradient memory of this rank's chunks (zero 2, 3: partitions and staging; else whole).
  int64_t gradient_bytes() const;
  // Chunk c's fp32 parameters of this rank's range (without a bf16 working copy: what its optimizer
  // updates): element k is flat element shard_begin(c) + k.
  float* range_parameters(int c);
  // Bytes of fp32 parameter memory of this rank's chunks (zero 3: partitions and gathered copies; else
  // whole; none beside a bf16 working copy).
  int64_t parameter_bytes() const;
  // Chunk c's whole parameters copied to `host` (layout total floats); collective over DP with zero 3.
  void whole_parameters(int c, float* host);
  // Chunk c's whole layout assembled from every DP rank's `range_values` (its ZeRO range's elements,
  // such as AdamW's fp32 masters) into `host`. Collective over DP.
  void whole_from_ranges(int c, const float* range_values, float* host);

  // Before the step's first forward (the gradients have just been zeroed).
  void start_step();
  // After the pipeline's last backward: starts what has not started, waits for all of it.
  void finish_backward();
  // All-reduces the deferred ranges (after the tied-embedding sum over the embedding group).
  void reduce_deferred();
  // ZeRO 1/2, after the update: every range broadcast from its owner (zero 3: nothing to send).
  void gather_parameters();

  // Seconds this rank waited for DP communication in the last step, the part not hidden behind
  // backward: reduction waits, and with ZeRO the parameter gather (which nothing overlaps).
  double last_exposed_s() const { return exposed_s_; }
  // Bytes of gradients this rank handed to reductions in the last step.
  int64_t last_reduced_bytes() const { return reduced_bytes_; }

 private:
  struct Bucket {
    int64_t begin = 0, end = 0;
    bool dirty = false;              // written since its last reduction started
    std::vector<Request> requests;   // in flight
  };
  struct Chunk {
    GptModel* model = nullptr;
    int64_t deferred = 0;
    std::vector<int64_t> bounds;     // ZeRO ranges of the DP ranks (one range [0, total) with zero 0)
    std::vector<Bucket> buckets;     // from the end of the layout down to `deferred`
    int backwards_done = 0;          // micro-batches whose backward has ended this step
    uint16_t* wire = nullptr;        // bf16 reduction: the gradients' bf16 patterns, reduced in place
  };
  int owner_range() const { return opt_.zero > 0 ? dp_.rank() : 0; }
  void writing(Chunk& c, int64_t begin, int64_t end);
  void final_from(Chunk& c, int64_t from);
  void launch(Chunk& c, Bucket& b);
  void complete(Chunk& c, Bucket& b);
  // Starts the all-reduce of c's gradients [begin, begin + n): in place, or (bf16) of their bf16 patterns.
  Request start_reduction(Chunk& c, int64_t begin, int64_t n);
  // After that reduction's wait: (bf16) the sums widened into the gradients.
  void take_reduction(Chunk& c, int64_t begin, int64_t n);
  void progress(Chunk& c);
  // ZeRO 1/2: every range [bounds[r], bounds[r + 1]) of `values` (T: float or Bf16) broadcast from its owner r.
  template <class T>
  void broadcast_ranges(const std::vector<int64_t>& bounds, T* values, std::vector<Request>& pending);

  Group& dp_;
  Kernels& k_;
  Options opt_;
  std::vector<Chunk> chunks_;
  std::unique_ptr<ShardedGradients> sharded_;  // zero 2, 3
  std::unique_ptr<ShardedParameters> sharded_params_;  // zero 3
  double exposed_s_ = 0;
  int64_t reduced_bytes_ = 0;
};

}  // namespace trident
