#pragma once
// Device arrays for the kernel tests: zeroed device memory (never freed: each test program is short) and
// a blocking copy back to the host, each call checked.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

namespace gpusim_test {

template <class T>
T* device_array(size_t n) {
  T* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemset(p, 0, n * sizeof(T)), cudaSuccess);
  return p;
}

template <class T>
std::vector<T> to_host(const T* d, size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

}  // namespace gpusim_test
