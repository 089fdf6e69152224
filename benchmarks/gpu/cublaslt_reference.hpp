#pragma once
// A GEMM run by cuBLASLt directly, outside trident's Matmul (kernels/cuda/matmul.cu): the reference the
// per-op table's GEMM rows are read against. Column-major D = op(A) op(B) + beta C with bf16 A and B,
// CUBLAS_COMPUTE_32F, no epilogue, operands in blocks of its own (cudaMalloc: 256-byte aligned), and
// either bf16 C and D (what llm.c and PyTorch's autocast run) or fp32 C and D (trident's types). It asks
// the heuristic for up to max_candidates algorithms, so a benchmark can time the heuristic's first
// choice against the others: what trident's one-algorithm plan may leave on the table. With
// gelu_aux_bias it times the GELU epilogue against a plain GEMM and trident's GELU kernel.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace trident::bench {

struct LtProblem {
  bool transa = false, transb = false;
  int64_t m = 0, n = 0, k = 0;  // D is m x n; op(A) m x k; op(B) k x n
  bool bf16_out = false;
  float beta = 0.0f;
  // CUBLASLT_EPILOGUE_GELU_AUX_BIAS: D = gelu(op(A) op(B) + bias), the pre-activation kept in an aux
  // matrix, bias and aux of D's type (the fused MLP forward that llm.c offers as -ge 1).
  bool gelu_aux_bias = false;
};

class LtGemm {
 public:
  // Throws trident::Error when cuBLASLt refuses the problem or offers no algorithm for it.
  LtGemm(cudaStream_t stream, const LtProblem& p, int max_candidates);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // How many algorithms the heuristic offered, best first by its own estimate.
  int candidates() const { return int(algos_.size()); }
  // Enqueues the GEMM with candidate i on the stream.
  void run(int i);
  double flops() const { return 2.0 * double(p_.m) * double(p_.n) * double(p_.k); }

 private:
  void release();  // frees whatever the constructor got so far

  cudaStream_t stream_;
  LtProblem p_;
  cublasLtHandle_t handle_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
  void *A_ = nullptr, *B_ = nullptr, *C_ = nullptr, *bias_ = nullptr, *aux_ = nullptr, *workspace_ = nullptr;
  std::vector<cublasLtMatmulAlgo_t> algos_;
};

}  // namespace trident::bench
