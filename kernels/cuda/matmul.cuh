#pragma once
// Linear layer GEMMs through cuBLASLt on fp32 matrices, on the backend's stream, with one handle and one
// 32 MiB workspace owned by the object. The compute type follows the MatmulPrecision (kernels.hpp):
// exact fp32 (CUBLAS_COMPUTE_32F), or the operands rounded to TF32 / bfloat16 on tensor cores
// (CUBLAS_COMPUTE_32F_FAST_TF32 / _FAST_16BF) with fp32 accumulation and output.
//
// Row-major [R, K] is column-major [K, R]; with that, for y = x W^T + b (W is [OC, IC]):
//   forward  out^T[OC,N]  = W^T-stored[IC,OC]^T * inp^T[IC,N]      (transa = T), bias epilogue
//   dinp     dinp^T[IC,N] += W^T-stored[IC,OC]  * dout^T[OC,N]     (beta = 1)
//   dweight  dW^T[IC,OC]  += inp^T[IC,N]        * (dout^T[OC,N])^T (transb = T, beta = 1)
// A plan (descriptors, layouts, the heuristic's algorithm) is cached per shape and per pointer
// alignment class: cuBLASLt's heuristic assumes 256-byte aligned operands unless told otherwise,
// and callers pass sub-buffers (parameter slices) with any 4-byte alignment.
// cuBLAS gives bitwise identical results for the same shapes, device and library version.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <map>

#include "kernels.hpp"

namespace trident::cuda {

class DeviceAllocator;

class Matmul {
 public:
  Matmul(cudaStream_t stream, DeviceAllocator& alloc);
  ~Matmul();
  Matmul(const Matmul&) = delete;
  Matmul& operator=(const Matmul&) = delete;

  void forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t IC,
               int64_t OC);
  void backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight,
                int64_t N, int64_t IC, int64_t OC);
  void set_precision(MatmulPrecision precision) { precision_ = precision; }

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  // (transa, transb, m, n, k, lda, ldb, ldc, bias?, align A, align B, align C, align bias, precision)
  using Key = std::array<int64_t, 14>;

  // Column-major C[m,n] = op(A) op(B) + beta C (+ bias[m] per row when bias != nullptr).
  void gemm(bool transa, bool transb, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* B,
            int64_t ldb, float* C, int64_t ldc, float beta, const float* bias);
  Plan& plan(const Key& key, const float* bias);

  cudaStream_t stream_;
  DeviceAllocator& alloc_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::map<Key, Plan> plans_;
  MatmulPrecision precision_ = MatmulPrecision::FP32;
};

}  // namespace trident::cuda
