#pragma once
// ZeRO-2 gradient storage: a DP rank keeps the gradients of its own ZeRO range only.
//
// Each chunk's backward writes a micro-batch's gradients segment by segment (GradientSink: the head,
// each layer, the embeddings) into staging buffers taken from a pool shared by the rank's chunks. When
// a segment is closed its reduction starts at once: one non-blocking reduce per DP rank whose range the
// segment overlaps (usually one, two at a range boundary), each rank's own part summed in place in its
// staging buffer. When the reduction completes, the owner adds its part onto its partition (the running
// sum over micro-batches and DP ranks) and the staging buffer goes back to the pool. At most
// kMaxInFlight segments are being reduced while backward writes the next: opening one more first
// completes the oldest, and a new buffer is allocated only when no free one fits and nothing is in
// flight. So a buffer is added only when every other one is busy in an open segment (at most one) or
// too small: the pool holds about one buffer per distinct segment size, none larger than the largest
// segment (the token embedding, Vp/tp x hidden, or a layer), whatever the number of layers.
//
// A tied token embedding held by two pipeline stages (`deferred` elements at the start of the chunk)
// must be summed over the two stages before its DP reduction: it keeps a whole accumulation buffer,
// written in place by backward, all-reduced over DP by reduce_deferred(), then copied into the
// partition.
//
// With `bf16` (mesh.grad_reduce_dtype) a closed segment is rounded into its staging buffer's bf16
// companion and that is reduced (half the bytes; the reduction's partial sums rounded to bf16 as NCCL's
// are); the owner widens its part before adding it onto the fp32 partition. So each micro-batch's
// contribution is rounded, and the running sum over micro-batches stays fp32.
//
// Host memory (the CPU backend); progress comes from MPI_Test calls at every open and close, since
// MPICH progresses non-blocking collectives only inside MPI calls.
#include <cstdint>
#include <list>
#include <memory>
#include <vector>

#include "comm/group.hpp"
#include "kernels.hpp"
#include "model/gpt.hpp"

namespace trident {

class ShardedGradients {
 public:
  static constexpr int kMaxInFlight = 2;

  // Installs itself as the gradient sink of every chunk (which frees the chunks' whole gradient
  // buffers). `bounds[c]` are chunk c's ZeRO ranges (dp + 1 boundaries). `wait_at_close`: each
  // segment's reduction is waited for when it closes (mesh.overlap_grad_reduce = false). `bf16`: the
  // reductions move bf16 (mesh.grad_reduce_dtype).
  ShardedGradients(Group& dp, Kernels& kernels, std::vector<GptModel*> chunks, std::vector<std::vector<int64_t>> bounds,
                   std::vector<int64_t> deferred, bool wait_at_close, bool bf16);
  ~ShardedGradients();
  ShardedGradients(const ShardedGradients&) = delete;
  ShardedGradients& operator=(const ShardedGradients&) = delete;

  // Zeroes the partitions (and deferred buffers) before the step's first backward.
  void start_step();
  // Completes every reduction in flight: the partitions then hold the step's reduced gradients.
  void finish_backward();
  // All-reduces the deferred ranges over DP and copies this rank's part into its partitions.
  void reduce_deferred(int64_t piece_elements);

  // Chunk c's reduced gradients of this rank's range: element k is flat element range begin + k.
  float* partition(int c) { return chunks_[size_t(c)].partition; }
  // Chunk c's accumulation buffer of its deferred elements [0, deferred) (null when none).
  float* deferred(int c) { return chunks_[size_t(c)].deferred_buffer; }
  // Bytes of gradient memory: partitions, deferred buffers and the staging pool as allocated so far
  // (with bf16, their bf16 companions too).
  int64_t bytes() const;

  double exposed_s() const { return exposed_s_; }
  int64_t reduced_bytes() const { return reduced_bytes_; }
  void reset_counters() { exposed_s_ = 0, reduced_bytes_ = 0; }

 private:
  struct Staging {
    float* data = nullptr;
    uint16_t* wire = nullptr;  // bf16: the rounded segment, reduced in place
    int64_t capacity = 0;
    bool busy = false;
  };
  struct Segment {  // closed, being reduced
    int chunk = 0;
    int64_t begin = 0, end = 0;
    Staging* staging = nullptr;
    std::vector<Request> requests;
  };
  struct Chunk;
  class Sink;
  struct Chunk {
    GptModel* model = nullptr;
    std::vector<int64_t> bounds;
    int64_t mine0 = 0, mine1 = 0;  // this rank's range
    int64_t deferred = 0;
    float* partition = nullptr;
    float* deferred_buffer = nullptr;
    uint16_t* deferred_wire = nullptr;  // bf16: the deferred range's patterns, all-reduced in place
    std::vector<std::pair<int64_t, Staging*>> open;  // begin of each open segment, its staging
    std::unique_ptr<Sink> sink;
  };

  float* open(int c, int64_t begin, int64_t end);
  void close(int c, int64_t begin, int64_t end);
  Staging* take_staging(int64_t n);
  void complete(Segment& s);
  void progress();
  // Starts the reduction to `root` of staging elements [offset, offset + n): fp32 in place, or their bf16 patterns.
  Request start_reduce(Staging& s, int64_t offset, int64_t n, int root);

  Group& dp_;
  Kernels& k_;
  bool wait_at_close_;
  bool bf16_;
  std::vector<Chunk> chunks_;
  std::list<Staging> pool_;     // stable addresses
  std::list<Segment> in_flight_;  // oldest first
  double exposed_s_ = 0;
  int64_t reduced_bytes_ = 0;
};

}  // namespace trident
