#pragma once
// What gpu-sim's library tests (cuBLASLt, cub) share: a fixture that owns a device, a non-blocking
// stream and the device memory a test allocates, and a host function that holds a stream until a flag
// is set. TearDown synchronises the stream and expects `expected_sync` (a test that faults its device
// expects the fault). A fixture built with device -1 picks its device itself (use_device): a fault is
// sticky, so tests that fault a device take one of their own.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace gpusim_test {

inline void CUDART_CB wait_for_flag(void* flag) {
  while (!static_cast<std::atomic<bool>*>(flag)->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

class DeviceFixture : public ::testing::Test {
 protected:
  explicit DeviceFixture(int device) : device_(device) {}
  void SetUp() override {
    if (device_ >= 0) use_device(device_);
  }
  void TearDown() override {
    if (stream) {
      EXPECT_EQ(cudaStreamSynchronize(stream), expected_sync);
    }
    cudaGetLastError();
    for (void* p : allocations) cudaFree(p);
    if (stream) cudaStreamDestroy(stream);
    release_library();
    cudaSetDevice(0);
  }
  void use_device(int device) {
    ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    start_library();
  }
  // The library under test, started once the device is current, released after the stream.
  virtual void start_library() {}
  virtual void release_library() {}

  void* device_bytes(size_t bytes) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
    allocations.push_back(p);
    return p;
  }
  template <class T>
  T* to_device(const std::vector<T>& h) {
    auto* p = static_cast<T*>(device_bytes(std::max<size_t>(h.size(), 1) * sizeof(T)));
    EXPECT_EQ(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    return p;
  }
  template <class T>
  std::vector<T> to_host(const T* d, size_t n) {
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }

  cudaStream_t stream = nullptr;
  std::vector<void*> allocations;
  cudaError_t expected_sync = cudaSuccess;

 private:
  int device_;
};

}  // namespace gpusim_test
