#pragma once
// ZeRO-3 parameter storage: a DP rank keeps the parameters of its own ZeRO range only (the values its
// optimizer updates), and every chunk reads whole segments through a ParameterSource.
//
// Acquiring a segment (a layer, the head's tail, an embedding) gathers it over the DP group into a
// buffer from a pool: one non-blocking broadcast from each DP rank whose range the segment overlaps
// (the owner first copies its part in). Releasing it returns the buffer. prefetch() starts the gather
// of the segment the model will acquire next, so it overlaps the current segment's compute; every DP
// rank runs the same schedule, so the collectives are issued in the same order everywhere. A gathered
// copy lives from just before a segment's forward (or backward) to just after it: the pool holds
// about one buffer per distinct segment size plus one prefetched, none larger than the largest
// segment (the token embedding, Vp/tp x hidden, or a layer).
//
// With a bf16 working copy (train.precision = "bf16") the partitions are the fp32 masters and a
// gather moves bf16: the owner rounds its part into the buffer's bf16 companion, that is broadcast,
// and every rank (the owner too) computes with the rounded values; half the bytes of an fp32 gather.
// What the model reads in fp32 (biases, norm weights and biases, the position embedding:
// model/fp32_tensors.hpp) is broadcast in fp32, as the working copy below ZeRO-3 keeps it.
//
// Host memory (the CPU backend).
#include <cstdint>
#include <list>
#include <memory>
#include <vector>

#include "comm/group.hpp"
#include "kernels.hpp"
#include "model/fp32_tensors.hpp"
#include "model/gpt.hpp"
#include "model/parameter_buffer_pool.hpp"

namespace trident {

class ShardedParameters {
 public:
  // Installs itself as the parameter source of every chunk (which frees their whole parameter
  // buffers). `bounds[c]`: chunk c's ZeRO ranges (dp + 1 boundaries).
  ShardedParameters(Group& dp, Kernels& kernels, std::vector<GptModel*> chunks,
                    std::vector<std::vector<int64_t>> bounds, bool bf16);
  ~ShardedParameters();
  ShardedParameters(const ShardedParameters&) = delete;
  ShardedParameters& operator=(const ShardedParameters&) = delete;

  // Chunk c's parameters of this rank's range: element k is flat element range begin + k.
  float* partition(int c) { return chunks_[size_t(c)].partition; }
  // The whole of chunk c's parameters (the fp32 masters under bf16), gathered over DP into `host`
  // (layout total floats) on every DP rank (checkpoints, tests). Collective over the DP group.
  void gather_whole(int c, float* host);
  // Checks that no gathered copy outlives the step (before the update changes the partitions).
  void check_released() const;
  // Bytes of parameter memory: partitions and the gather pool as allocated so far.
  int64_t bytes() const;
  // Seconds spent waiting for gathers since the last call.
  double take_wait_s();

 private:
  using Buffer = ParameterBufferPool::Buffer;  // (bf16: wire is what is broadcast, unpacked into data)
  struct Gathered {
    int64_t begin = 0, end = 0;
    Buffer* buffer = nullptr;
    std::vector<Request> requests;  // empty once complete
    bool acquired = false;
  };
  using Source = ChunkParameterSource<ShardedParameters>;
  friend Source;
  struct Chunk {
    explicit Chunk(GptModel* m) : model(m), fp32_tensors(m->layout()) {}
    GptModel* model = nullptr;
    Fp32Tensors fp32_tensors;  // bf16: the tensors gathered in fp32
    std::vector<int64_t> bounds;
    int64_t mine0 = 0, mine1 = 0;
    float* partition = nullptr;
    std::list<Gathered> gathered;
    std::unique_ptr<Source> source;
  };

  const float* acquire(int c, int64_t begin, int64_t end);
  void release(int c, int64_t begin, int64_t end);
  void prefetch(int c, int64_t begin, int64_t end);
  Gathered& start_gather(Chunk& chunk, int64_t begin, int64_t end);

  Group& dp_;
  Kernels& k_;
  bool bf16_;
  std::vector<Chunk> chunks_;
  ParameterBufferPool pool_;
  double wait_s_ = 0;
};

}  // namespace trident
