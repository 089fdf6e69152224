// DeviceCopies on a CUDA stream: page-locked buffers from cudaMallocHost; each copy is queued on the
// compute stream (so it follows the kernels that produced the data) and waited for.
#include <cuda_runtime.h>

#include "comm/staging.hpp"
#include "core/error.hpp"
#include "cuda/module_parts.hpp"

namespace trident::cuda {
namespace {

void check(cudaError_t rc, const char* what) {
  TRIDENT_CHECK(rc == cudaSuccess, "{} failed for host-staged communication: {}", what, cudaGetErrorString(rc));
}

class CudaCopies final : public DeviceCopies {
 public:
  explicit CudaCopies(cudaStream_t stream) : stream_(stream) {}
  void* alloc_host(int64_t bytes) override {
    void* p = nullptr;
    check(cudaMallocHost(&p, size_t(bytes)), "cudaMallocHost");
    return p;
  }
  void free_host(void* p) override { cudaFreeHost(p); }
  void to_host(void* host, const void* device, int64_t bytes) override {
    check(cudaMemcpyAsync(host, device, size_t(bytes), cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync (to host)");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  void to_device(void* device, const void* host, int64_t bytes) override {
    check(cudaMemcpyAsync(device, host, size_t(bytes), cudaMemcpyHostToDevice, stream_),
          "cudaMemcpyAsync (to device)");
    // The host buffer is reused by the next transfer: wait until the copy has read it.
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

 private:
  cudaStream_t stream_;
};

}  // namespace

std::unique_ptr<DeviceCopies> make_copies(void* compute_stream) {
  TRIDENT_CHECK(compute_stream != nullptr, "internal: host staging needs the CUDA compute stream");
  return std::make_unique<CudaCopies>(static_cast<cudaStream_t>(compute_stream));
}

}  // namespace trident::cuda
