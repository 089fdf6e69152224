#include "cublaslt_reference.hpp"

#include <algorithm>
#include <cstring>
#include <random>

#include "core/error.hpp"
#include "cuda/check.cuh"

namespace trident::bench {

namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;  // as trident's Matmul

// A device block of `count` elements of `bytes` bytes each (bf16 patterns or floats), zero-filled when
// `zero`, else with uniform(-1, 1) values: at most kDrawn drawn on the host, repeated on the device for a
// longer block (as common/device_buffers.hpp fills its buffers), so a GEMM's operands take milliseconds.
constexpr size_t kDrawn = size_t(1) << 20;

void* filled_block(int64_t count, size_t bytes, bool zero, uint32_t seed) {
  void* p = nullptr;
  const size_t size = size_t(count) * bytes;
  TRIDENT_CUDA_CHECK(cudaMalloc(&p, size));
  if (zero) {
    TRIDENT_CUDA_CHECK(cudaMemset(p, 0, size));
    return p;
  }
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  const size_t drawn = std::min(kDrawn, size_t(count));
  std::vector<float> values(drawn);
  for (auto& x : values) x = d(gen);
  std::vector<uint16_t> patterns(bytes == sizeof(float) ? 0 : drawn);
  for (size_t i = 0; i < patterns.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &values[i], sizeof u);
    patterns[i] = uint16_t(u >> 16);  // truncated: any bf16 value in (-1, 1) serves a timing
  }
  const void* host = patterns.empty() ? static_cast<const void*>(values.data()) : patterns.data();
  auto* bytes_p = static_cast<char*>(p);
  TRIDENT_CUDA_CHECK(cudaMemcpy(bytes_p, host, drawn * bytes, cudaMemcpyHostToDevice));
  for (size_t done = drawn * bytes; done < size; done *= 2)
    TRIDENT_CUDA_CHECK(cudaMemcpy(bytes_p + done, bytes_p, std::min(done, size - done), cudaMemcpyDeviceToDevice));
  return p;
}

}  // namespace

LtGemm::LtGemm(cudaStream_t stream, const LtProblem& p, int max_candidates) : stream_(stream), p_(p) {
  const cudaDataType_t out_type = p.bf16_out ? CUDA_R_16BF : CUDA_R_32F;
  const size_t out_bytes = p.bf16_out ? 2 : 4;
  const int64_t a_rows = p.transa ? p.k : p.m, a_cols = p.transa ? p.m : p.k;
  const int64_t b_rows = p.transb ? p.n : p.k, b_cols = p.transb ? p.k : p.n;
  cublasLtMatmulPreference_t pref = nullptr;
  try {
    TRIDENT_CUBLAS_CHECK(cublasLtCreate(&handle_));
    TRIDENT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t opa = p.transa ? CUBLAS_OP_T : CUBLAS_OP_N, opb = p.transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    TRIDENT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    TRIDENT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    if (p.gelu_aux_bias) {
      bias_ = filled_block(p.m, out_bytes, false, 13);
      aux_ = filled_block(p.m * p.n, out_bytes, true, 0);
      const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
      const int64_t aux_ld = p.m;
      TRIDENT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
      TRIDENT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_, sizeof bias_));
      TRIDENT_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux_, sizeof aux_));
      TRIDENT_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
    }
    TRIDENT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a_, CUDA_R_16BF, uint64_t(a_rows), uint64_t(a_cols), a_rows));
    TRIDENT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b_, CUDA_R_16BF, uint64_t(b_rows), uint64_t(b_cols), b_rows));
    TRIDENT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c_, out_type, uint64_t(p.m), uint64_t(p.n), p.m));
    A_ = filled_block(p.m * p.k, 2, false, 11);
    B_ = filled_block(p.k * p.n, 2, false, 12);
    C_ = filled_block(p.m * p.n, out_bytes, true, 0);
    TRIDENT_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));

    TRIDENT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = kWorkspaceBytes;
    TRIDENT_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    std::vector<cublasLtMatmulHeuristicResult_t> results(size_t(std::max(max_candidates, 1)));
    int returned = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, desc_, a_, b_, c_, c_, pref, int(results.size()),
                                                             results.data(), &returned);
    TRIDENT_CHECK(st == CUBLAS_STATUS_SUCCESS && returned > 0,
                  "cuBLASLt offers no algorithm for the reference GEMM m={} n={} k={} ({} out{}): {}", p.m, p.n,
                  p.k, p.bf16_out ? "bf16" : "fp32", p.gelu_aux_bias ? ", GELU_AUX_BIAS" : "",
                  cublasGetStatusString(st));
    for (int i = 0; i < returned; ++i)
      if (results[size_t(i)].state == CUBLAS_STATUS_SUCCESS) algos_.push_back(results[size_t(i)].algo);
    cublasLtMatmulPreferenceDestroy(pref);
  } catch (...) {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    release();
    throw;
  }
}

LtGemm::~LtGemm() { release(); }

void LtGemm::release() {
  cudaStreamSynchronize(stream_);  // queued GEMMs may still read the blocks (errors ignored: clean-up)
  cudaFree(A_);
  cudaFree(B_);
  cudaFree(C_);
  cudaFree(bias_);
  cudaFree(aux_);
  cudaFree(workspace_);
  if (a_) cublasLtMatrixLayoutDestroy(a_);
  if (b_) cublasLtMatrixLayoutDestroy(b_);
  if (c_) cublasLtMatrixLayoutDestroy(c_);
  if (desc_) cublasLtMatmulDescDestroy(desc_);
  if (handle_) cublasLtDestroy(handle_);
  A_ = B_ = C_ = bias_ = aux_ = workspace_ = nullptr;
  a_ = b_ = c_ = nullptr;
  desc_ = nullptr;
  handle_ = nullptr;
}

void LtGemm::run(int i) {
  TRIDENT_CHECK(i >= 0 && i < candidates(), "reference GEMM: candidate {} of {}", i, candidates());
  const float alpha = 1.0f, beta = p_.beta;
  TRIDENT_CUBLAS_CHECK(cublasLtMatmul(handle_, desc_, &alpha, A_, a_, B_, b_, &beta, C_, c_, C_, c_,
                                      &algos_[size_t(i)], workspace_, kWorkspaceBytes, stream_));
}

}  // namespace trident::bench
