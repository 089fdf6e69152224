#pragma once
// Linear layer GEMMs through cuBLASLt on fp32 matrices, on the backend's stream, with one handle and one
// 32 MiB workspace owned by the object. The MatmulPrecision (core/matmul_precision.hpp) picks the GEMM:
//   fp32: CUBLAS_COMPUTE_32F on fp32 operands (exact fp32, CUDA cores);
//   tf32: CUBLAS_COMPUTE_32F_FAST_TF32 on fp32 operands (tensor cores round them to TF32);
//   bf16: CUBLAS_COMPUTE_32F on bf16 A and B with fp32 C and D (tensor cores, fp32 accumulation). An
//         input given as bf16 patterns (GemmInput: a bf16 working copy, a saved activation) is read as
//         it is; one given as fp32 values is converted to a bfloat16 copy first (round to nearest even,
//         a kernel of ours).
// Not CUBLAS_COMPUTE_32F_FAST_16BF for bf16: on an H100 (cuBLAS 13.0) it gave TF32's numbers and
// speed, not bf16's (tests/kernels/test_matmul_precision.cpp found it).
//
// Row-major [R, K] is column-major [K, R]; with that, for y = x W^T + b (W is [OC, IC]):
//   forward  out^T[OC,N]  = W^T-stored[IC,OC]^T * inp^T[IC,N]      (transa = T), bias epilogue
//   dinp     dinp^T[IC,N] += W^T-stored[IC,OC]  * dout^T[OC,N]     (beta = 1; written: beta = 0)
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

#include "cuda/ops.cuh"
#include "kernels.hpp"

namespace trident::cuda {

class DeviceAllocator;

class Matmul {
 public:
  Matmul(cudaStream_t stream, DeviceAllocator& alloc);
  ~Matmul();
  Matmul(const Matmul&) = delete;
  Matmul& operator=(const Matmul&) = delete;

  void forward(float* out, GemmInput inp, GemmInput weight, const float* bias, int64_t N, int64_t IC, int64_t OC);
  // dinp gets the input gradient added (Accumulate: the dinp GEMM's beta is 1) or written (Overwrite: beta 0).
  void backward(float* dinp, float* dweight, float* dbias, const float* dout, GemmInput inp, GemmInput weight,
                int64_t N, int64_t IC, int64_t OC, GradWrite dinp_write = GradWrite::Accumulate);
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
  // A GEMM operand as the GEMM reads it: the input itself (fp32 values, or bf16 patterns at least
  // 16-byte aligned under bf16), or a copy in a scratch block (bf16: the values converted, or patterns
  // less aligned copied; fp32: patterns widened), released when the Operand goes (stream-ordered: the
  // allocator may hand the block out again to work enqueued after the GEMMs that read it). Contiguous:
  // every caller's ld is its rows.
  struct Operand {
    const void* data;
    void* copy;
    DeviceAllocator* alloc;
    ~Operand();
    Operand(const Operand&) = delete;
    Operand& operator=(const Operand&) = delete;
  };
  Operand operand(const GemmInput& x, int64_t n);
  // A and B of the type the precision gives them (fp32, or bf16 from operand()).
  void gemm(bool transa, bool transb, int64_t m, int64_t n, int64_t k, const void* A, int64_t lda, const void* B,
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
