#pragma once
// A caching device allocator for one stream.
//
// Blocks are rounded up (to 512 B below 1 MiB, to 2 MiB above) and kept, when freed, in a free list
// per rounded size; a request takes a cached block of its rounded size if there is one and calls
// cudaMalloc only otherwise. All work on the memory is ordered on the one stream, so a block freed
// by the host after enqueueing its last use can be handed out again at once: the new owner's work
// is enqueued after that use. On cudaMalloc failure the cache is emptied (after a stream sync) and
// the allocation retried once; a second failure throws an error with the numbers needed to act.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace trident::cuda {

class DeviceAllocator {
 public:
  explicit DeviceAllocator(cudaStream_t stream) : stream_(stream) {}
  ~DeviceAllocator();  // cudaFree of every block, cached or still handed out
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  void* allocate(int64_t bytes);         // contents undefined (scratch)
  void* allocate_zeroed(int64_t bytes);  // all-zero bytes (cudaMemsetAsync on the stream)
  void release(void* p);                 // nullptr is a no-op; a pointer not from here throws
  void empty_cache();                    // cudaFree the cached (free) blocks

  int64_t allocated() const { return allocated_; }  // bytes of the blocks handed out now
  int64_t peak() const { return peak_; }
  int64_t reserved() const { return reserved_; }    // bytes held from cudaMalloc (handed out + cached)

  static size_t rounded(int64_t bytes);

 private:
  cudaStream_t stream_;
  std::unordered_map<void*, size_t> live_;                 // handed-out block -> its rounded size
  std::unordered_map<size_t, std::vector<void*>> cached_;  // rounded size -> free blocks
  int64_t allocated_ = 0, peak_ = 0, reserved_ = 0;
};

}  // namespace trident::cuda
