#pragma once
// The buffers a ParameterSource hands out for acquired segments (model/gpt.hpp): a segment's values
// live in a pooled buffer from its acquire to its release. Segments are released right after their
// use, so the pool settles at the few buffers in use at once (a layer, the head's tail, an embedding).
#include <cstdint>
#include <list>

#include "kernels.hpp"

namespace trident {

class ParameterBufferPool {
 public:
  struct Buffer {
    float* data = nullptr;
    uint16_t* wire = nullptr;  // with_wire: bf16 patterns beside data (what a bf16 gather moves)
    int64_t capacity = 0;
    bool busy = false;
  };
  ParameterBufferPool(Kernels& kernels, bool with_wire) : k_(kernels), with_wire_(with_wire) {}
  ~ParameterBufferPool();
  ParameterBufferPool(const ParameterBufferPool&) = delete;
  ParameterBufferPool& operator=(const ParameterBufferPool&) = delete;

  // The smallest free buffer of at least n elements, else a new one; busy until give_back.
  Buffer* take(int64_t n);
  static void give_back(Buffer* buffer) { buffer->busy = false; }
  // Bytes of every buffer allocated so far (and their patterns).
  int64_t bytes() const;

 private:
  Buffer allocate(int64_t n);
  void release(Buffer& buffer);

  Kernels& k_;
  bool with_wire_;
  std::list<Buffer> buffers_;
};

}  // namespace trident
