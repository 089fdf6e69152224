#pragma once
// Error checks and launch helpers shared by the CUDA backend's .cu files (host side).
//
// TRIDENT_CUDA_CHECK(call) / TRIDENT_CUBLAS_CHECK(call) throw trident::Error naming the call's text,
// the error and the file:line. Kernels are launched with launch() (below), checked like any call:
// TRIDENT_CUDA_CHECK(launch(kernel, grid, block, 0, stream, args...)) reports a bad launch
// configuration at once (errors inside a kernel surface at the next synchronising call).
#include <cublasLt.h>
#include <cublas_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "core/error.hpp"

namespace trident::cuda {

inline void check_cuda(cudaError_t err, const char* call, const char* file, int line) {
  if (err == cudaSuccess) return;
  throw Error(std::string("CUDA error: ") + call + " failed with " + cudaGetErrorName(err) + " (" +
              cudaGetErrorString(err) + ") at " + file + ":" + std::to_string(line));
}

inline void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw Error(std::string("cuBLAS error: ") + call + " failed with " + cublasGetStatusName(status) + " (" +
              cublasGetStatusString(status) + ") at " + file + ":" + std::to_string(line));
}

// Blocks for a grid-stride loop over n items with `threads` threads per block: enough to fill the
// GPU, never more than `cap` (the loops stride over the rest), at least 1. Callers skip n == 0.
inline unsigned grid_for(int64_t n, int threads, int64_t cap = int64_t(1) << 16) {
  const int64_t blocks = (n + threads - 1) / threads;
  return unsigned(std::max<int64_t>(1, std::min(blocks, cap)));
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Whether p may be read and written as 16-byte vectors (float4): the test of the kernels' vector paths.
__host__ __device__ inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// kernel<<<grid, block, shared_bytes, stream>>>(args...), written as CUDA's typed cudaLaunchKernelEx:
// the one launch form that nvcc and a host compiler (gpu-sim: gpusim/README.md) both accept.
template <class... Params, class... Args>
cudaError_t launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                   Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace trident::cuda

#define TRIDENT_CUDA_CHECK(call) ::trident::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define TRIDENT_CUBLAS_CHECK(call) ::trident::cuda::check_cublas((call), #call, __FILE__, __LINE__)

// Grid-stride loop over [0, n) with 64-bit indices (valid for any n and any grid size).
#define TRIDENT_GRID_STRIDE(i, n)                                                                   \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, i##_stride = int64_t(gridDim.x) * blockDim.x; \
       i < (n); i += i##_stride)
