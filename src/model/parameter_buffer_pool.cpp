#include "model/parameter_buffer_pool.hpp"

namespace trident {

ParameterBufferPool::~ParameterBufferPool() {
  for (auto& b : buffers_) release(b);
}

// When no free buffer fits, the largest free one is replaced by one that does (rather than kept beside
// it), so the pool holds about what the segments in use at once need, whatever order their sizes come in.
ParameterBufferPool::Buffer* ParameterBufferPool::take(int64_t n) {
  Buffer* best = nullptr;
  Buffer* largest_free = nullptr;
  for (auto& b : buffers_) {
    if (b.busy) continue;
    if (b.capacity >= n && (!best || b.capacity < best->capacity)) best = &b;
    if (!largest_free || b.capacity > largest_free->capacity) largest_free = &b;
  }
  if (!best && largest_free) {
    release(*largest_free);
    *largest_free = allocate(n);
    best = largest_free;
  }
  if (!best) {
    buffers_.push_back(allocate(n));
    best = &buffers_.back();
  }
  best->busy = true;
  return best;
}

ParameterBufferPool::Buffer ParameterBufferPool::allocate(int64_t n) {
  return Buffer{k_.alloc(n), with_wire_ ? k_.alloc_bf16(n) : nullptr, n, false};
}

void ParameterBufferPool::release(Buffer& b) {
  k_.free(b.data);
  if (b.wire) k_.free(b.wire);
}

int64_t ParameterBufferPool::bytes() const {
  int64_t elements = 0;
  for (const auto& b : buffers_) elements += b.capacity;
  return elements * int64_t(sizeof(float) + (with_wire_ ? sizeof(uint16_t) : 0));
}

}  // namespace trident
