#pragma once
// A bf16 working copy kept in bf16 (train.precision = "bf16" with train.bf16_parameters, below ZeRO-3):
// each chunk's parameters as bf16 patterns, 2 bytes an element, instead of a whole fp32 buffer, and the
// fp32 values of what the model reads in fp32 (the biases, the norms' weights and biases, the position
// embedding: model/fp32_tensors.hpp) packed beside them. The optimizer keeps the fp32 masters of its
// range and writes their patterns (and those fp32 values) here in its update pass (optim/adamw.hpp);
// ZeRO 1/2 then broadcast each range's patterns and fp32 values from its owner.
//
// The model reads the copy through its ParameterSource: acquiring a segment (a layer, ln_f, the position
// embedding) widens that segment's patterns into a pooled fp32 buffer (exactly the bf16 values) with the
// fp32 tensors' values in their places, releasing it gives the buffer back; its GEMMs and the token
// embedding read the patterns as they are (ParameterSource::patterns, GemmInput,
// Kernels::embedding_forward_bf16), so the token embedding and the LM head are never widened. A chunk
// costs 2 bytes an element, 4 more for the tensors kept in fp32, plus one segment buffer (a layer, or
// the position embedding if larger), not 4 bytes an element.
// (ZeRO-3 keeps no whole working copy: its gathers round the masters but the tensors kept in fp32,
// data_parallel/sharded_parameters.hpp.)
#include <cstdint>
#include <list>
#include <memory>
#include <vector>

#include "kernels.hpp"
#include "model/fp32_tensors.hpp"
#include "model/gpt.hpp"
#include "model/parameter_buffer_pool.hpp"

namespace trident {

class Bf16WorkingCopy {
 public:
  // Installs itself as the parameter source of every chunk (a chunk built without its whole parameter
  // buffer: WholeBuffers::parameters false).
  Bf16WorkingCopy(Kernels& kernels, std::vector<GptModel*> chunks);
  ~Bf16WorkingCopy();
  Bf16WorkingCopy(const Bf16WorkingCopy&) = delete;
  Bf16WorkingCopy& operator=(const Bf16WorkingCopy&) = delete;

  // Chunk c's patterns: element k is flat element k of its layout.
  uint16_t* patterns(int c) { return chunks_[size_t(c)].patterns; }
  // Chunk c's tensors kept in fp32, packed (element k is fp32_tensors(c)'s packed element k).
  float* fp32_values(int c) { return chunks_[size_t(c)].fp32; }
  const Fp32Tensors& fp32_tensors(int c) const { return chunks_[size_t(c)].fp32_tensors; }
  // What chunk c's optimizer writes (optim/adamw.hpp).
  WorkingCopyView view(int c) { return {patterns(c), fp32_values(c), &fp32_tensors(c)}; }
  // Chunk c's whole working copy widened into `out` (backend memory, layout total floats): the values
  // the model computes with (a decoder reads whole parameters).
  void widen(int c, float* out);
  // The same into host memory (training samples, tests).
  void copy_to_host(int c, float* host);
  // Checks that no widened segment outlives the step (before the update rewrites the patterns).
  void check_released() const;
  // Bytes of parameter memory: the patterns, the fp32 tensors and the segment buffers allocated so far.
  int64_t bytes() const;

 private:
  struct Widened {
    int64_t begin = 0;
    ParameterBufferPool::Buffer* buffer = nullptr;
  };
  // A chunk's source: its segments widened, and its patterns for the GEMMs to read as they are.
  struct Source : ChunkParameterSource<Bf16WorkingCopy> {
    using ChunkParameterSource::ChunkParameterSource;
    const uint16_t* patterns() const override { return owner_.patterns(chunk_); }
  };
  friend ChunkParameterSource<Bf16WorkingCopy>;
  struct Chunk {
    explicit Chunk(GptModel* m) : model(m), fp32_tensors(m->layout()) {}
    GptModel* model = nullptr;
    uint16_t* patterns = nullptr;
    Fp32Tensors fp32_tensors;
    float* fp32 = nullptr;  // fp32_tensors' values, packed
    std::list<Widened> widened;
    std::unique_ptr<Source> source;
  };
  // Flat elements [begin, end) of the chunk's copy as fp32 values into out: the patterns widened, the
  // fp32 tensors copied.
  void widen_range(const Chunk& chunk, int64_t begin, int64_t end, float* out);
  const float* acquire(int c, int64_t begin, int64_t end);
  void release(int c, int64_t begin, int64_t end);
  void prefetch(int, int64_t, int64_t) {}  // nothing to prefetch: widening is one elementwise pass on the queue

  Kernels& k_;
  ParameterBufferPool pool_;
  std::vector<Chunk> chunks_;
};

}  // namespace trident
