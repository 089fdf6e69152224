#include "cuda/upload_ring.hpp"

#include <cstring>

#include "cuda/check.cuh"

namespace trident::cuda {

UploadRing::UploadRing(cudaStream_t stream) : stream_(stream) {}

UploadRing::~UploadRing() {
  for (Slot& s : slots_) {
    if (s.in_flight) cudaEventSynchronize(s.done);
    if (s.done) cudaEventDestroy(s.done);
    if (s.host) cudaFreeHost(s.host);
  }
}

bool UploadRing::upload(void* dst, const void* src, size_t bytes) {
  if (bytes > kSlotBytes) return false;
  Slot& s = slots_[next_];
  next_ = (next_ + 1) % kSlots;
  if (!s.host) {
    TRIDENT_CUDA_CHECK(cudaMallocHost(&s.host, kSlotBytes));
    TRIDENT_CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
  }
  if (s.in_flight) TRIDENT_CUDA_CHECK(cudaEventSynchronize(s.done));  // its previous copy has read it
  std::memcpy(s.host, src, bytes);
  TRIDENT_CUDA_CHECK(cudaMemcpyAsync(dst, s.host, bytes, cudaMemcpyHostToDevice, stream_));
  TRIDENT_CUDA_CHECK(cudaEventRecord(s.done, stream_));
  s.in_flight = true;
  return true;
}

}  // namespace trident::cuda
