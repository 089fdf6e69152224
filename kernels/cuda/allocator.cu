#include "cuda/allocator.cuh"

#include <algorithm>
#include <string>

#include "cuda/check.cuh"

namespace trident::cuda {

namespace {
constexpr size_t kSmallLimit = size_t(1) << 20;  // below: 512-byte granularity
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = size_t(2) << 20;  // at and above 1 MiB: 2 MiB granularity

#if defined(TRIDENT_GPU_SIM) && defined(__SANITIZE_ADDRESS__)
// gpu-sim under AddressSanitizer: every block has exactly the size asked for (gpu-sim's cudaMalloc is
// a host allocation of that size) and goes back to cudaFree, which waits for the device, instead of
// the cache; so a kernel that reads or writes past its buffer's end is reported at its line.
constexpr bool kExactBlocks = true;
#else
constexpr bool kExactBlocks = false;
#endif
}  // namespace

size_t DeviceAllocator::rounded(int64_t bytes) {
  // A zero-size request still gets a distinct, freeable block.
  const size_t b = bytes > 0 ? size_t(bytes) : 1;
  if (kExactBlocks) return b;
  const size_t unit = b < kSmallLimit ? kSmallRound : kLargeRound;
  return (b + unit - 1) / unit * unit;
}

DeviceAllocator::~DeviceAllocator() {
  cudaStreamSynchronize(stream_);  // no kernel may still use a block (errors ignored: destructor)
  for (auto& [p, size] : live_) cudaFree(p);
  for (auto& [size, blocks] : cached_)
    for (void* p : blocks) cudaFree(p);
}

void DeviceAllocator::empty_cache() {
  bool any = false;
  for (auto& [size, blocks] : cached_) any = any || !blocks.empty();
  if (!any) return;
  TRIDENT_CUDA_CHECK(cudaStreamSynchronize(stream_));  // cached blocks may still be read by queued work
  for (auto& [size, blocks] : cached_) {
    for (void* p : blocks) {
      TRIDENT_CUDA_CHECK(cudaFree(p));
      reserved_ -= int64_t(size);
    }
  }
  cached_.clear();
}

void* DeviceAllocator::allocate(int64_t bytes) {
  TRIDENT_CHECK(bytes >= 0, "CUDA allocator: negative size {} bytes requested", bytes);
  const size_t size = rounded(bytes);
  void* p = nullptr;
  auto it = cached_.find(size);
  if (it != cached_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
  } else {
    cudaError_t err = cudaMalloc(&p, size);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear the (non-sticky) error, give back the cache, try once more
      empty_cache();
      err = cudaMalloc(&p, size);
    }
    if (err != cudaSuccess) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      throw Error("CUDA out of memory: requested " + std::to_string(bytes) + " bytes (" + std::to_string(size) +
                  " rounded); trident has " + std::to_string(allocated_) + " bytes allocated and " +
                  std::to_string(reserved_) + " reserved on this device; the device reports " +
                  std::to_string(free_b) + " bytes free of " + std::to_string(total_b) + " (cudaMalloc: " +
                  cudaGetErrorString(err) + ")");
    }
    reserved_ += int64_t(size);
  }
  live_.emplace(p, size);
  allocated_ += int64_t(size);
  peak_ = std::max(peak_, allocated_);
  return p;
}

void* DeviceAllocator::allocate_zeroed(int64_t bytes) {
  void* p = allocate(bytes);
  TRIDENT_CUDA_CHECK(cudaMemsetAsync(p, 0, rounded(bytes), stream_));
  return p;
}

void DeviceAllocator::release(void* p) {
  if (p == nullptr) return;
  auto it = live_.find(p);
  TRIDENT_CHECK(it != live_.end(), "CUDA allocator: free of a pointer it did not allocate (or freed twice)");
  allocated_ -= int64_t(it->second);
  if (kExactBlocks) {
    TRIDENT_CUDA_CHECK(cudaFree(p));
    reserved_ -= int64_t(it->second);
  } else {
    cached_[it->second].push_back(p);
  }
  live_.erase(it);
}

}  // namespace trident::cuda
