#pragma once
// Device arrays for the kernel tests: zeroed device memory (never freed: each test program is short),
// blocking copies to and from the host, each call checked, and a typed launch on the default stream.
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

template <class T>
T* to_device(const std::vector<T>& h) {
  T* d = device_array<T>(h.size());
  EXPECT_EQ(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}

template <class... Params, class... Args>
cudaError_t launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, Args... args) {
  cudaLaunchConfig_t c{};
  c.gridDim = grid;
  c.blockDim = block;
  c.dynamicSmemBytes = shared;
  c.stream = nullptr;
  return cudaLaunchKernelEx(&c, kernel, args...);
}

}  // namespace gpusim_test
