// The CUDA backend's small uploads (every micro-batch's token and target ids) never make the host wait
// for the GPU (kernels/cuda/upload_ring.hpp): with the stream held by a host function until the test
// releases it, the uploads return, and the data then arrives in stream order. CUDA builds only (in
// test_kernels_cuda; on gpu-sim a copy from pageable memory waits for the stream, as the driver's
// staging does on a GPU, so the old path would hold this test until the host function gave up).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "cuda/cuda_kernels.hpp"
#include "kernel_test_util.hpp"

namespace trident::kt {
namespace {

class CudaUploadTest : public KernelTest {};

struct Hold {
  std::atomic<bool> released{false};
  std::atomic<bool> gave_up{false};
};

// Runs on the stream: waits for the test's release, 60 s at most (then the uploads waited for it).
void CUDART_CB hold_stream(void* arg) {
  auto* h = static_cast<Hold*>(arg);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!h->released.load()) {
    if (std::chrono::steady_clock::now() > until) {
      h->gave_up = true;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

TEST_P(CudaUploadTest, SmallUploadsDoNotWaitForTheGpu) {
  const int64_t n = 2048, uploads = 4;  // fewer than the ring's slots: none has to be waited for
  Buf dst(*k, n * uploads);
  k->fence();
  Hold hold;
  ASSERT_EQ(cudaLaunchHostFunc(static_cast<cudaStream_t>(cuda::native_stream(*k)), hold_stream, &hold), cudaSuccess);
  VecF host(n);
  for (int64_t u = 0; u < uploads; ++u) {
    for (int64_t i = 0; i < n; ++i) host[i] = float(u * n + i);
    k->copy_to_device(dst.get() + u * n, host.data(), n);
  }
  const bool returned_while_held = !hold.gave_up.load();
  hold.released = true;
  const VecF got = dst.host();
  EXPECT_TRUE(returned_while_held) << "an upload waited for the stream (the host function gave up after 60 s)";
  EXPECT_FALSE(hold.gave_up.load());
  for (int64_t i = 0; i < n * uploads; ++i) ASSERT_EQ(got[i], float(i)) << "element " << i;
}

TRIDENT_INSTANTIATE_KERNEL_SUITE(CudaUploadTest);

}  // namespace
}  // namespace trident::kt
