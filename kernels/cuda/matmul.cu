// Linear layer: the cuBLASLt GEMMs (see matmul.cuh) and the backend's own bias kernels, forward and
// backward side by side. dbias is a deterministic two-pass column sum in double (reduce.cuh).
#include "cuda/matmul.cuh"

#include <string>

#include "cuda/allocator.cuh"
#include "cuda/bf16.cuh"
#include "cuda/check.cuh"
#include "cuda/ops.cuh"
#include "cuda/reduce.cuh"

namespace trident::cuda {

namespace {

constexpr int kThreads = 256;
constexpr size_t kWorkspaceBytes = size_t(32) << 20;
// The bias epilogue is used only with a bias pointer aligned at least this much; a less aligned
// bias (a slice of a flat parameter buffer) is added by add_bias instead.
constexpr int64_t kEpilogueBiasAlignment = 16;
// bf16 patterns are handed to cuBLASLt as they are only when aligned at least this much (Matmul::operand).
constexpr int64_t kDirectPatternAlignment = 16;

// Largest power of two dividing the address, capped at 256 (cuBLASLt's default assumption).
int64_t alignment_of(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  int64_t align = 256;
  while (align > 1 && (a % uintptr_t(align)) != 0) align /= 2;
  return align;
}

// Row i of out[N, OC] (grid-stride over rows), threads over columns.
__global__ void broadcast_bias_kernel(float* out, const float* bias, int64_t N, int64_t OC) {
  for (int64_t i = blockIdx.x; i < N; i += gridDim.x)
    for (int64_t o = threadIdx.x; o < OC; o += blockDim.x) out[i * OC + o] = bias ? bias[o] : 0.0f;
}

__global__ void add_bias_kernel(float* out, const float* bias, int64_t N, int64_t OC) {
  for (int64_t i = blockIdx.x; i < N; i += gridDim.x)
    for (int64_t o = threadIdx.x; o < OC; o += blockDim.x) out[i * OC + o] += bias[o];
}

struct BiasTerms {
  const float* dout;
  int64_t OC;
  __device__ void operator()(int64_t r, int64_t c, double* acc) const { acc[0] += double(dout[r * OC + c]); }
};

cublasComputeType_t compute_type(MatmulPrecision precision) {
  return precision == MatmulPrecision::TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

__global__ void to_bf16_kernel(uint16_t* out, const float* in, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = bf16_bits(in[i]);
}

const char* precision_name(MatmulPrecision precision) {
  return precision == MatmulPrecision::BF16 ? "bf16" : precision == MatmulPrecision::TF32 ? "tf32" : "fp32";
}

unsigned row_blocks(int64_t N) { return unsigned(std::min<int64_t>(N, int64_t(1) << 20)); }

}  // namespace

void broadcast_bias(cudaStream_t stream, float* out, const float* bias, int64_t N, int64_t OC) {
  if (N <= 0 || OC <= 0) return;
  TRIDENT_CUDA_CHECK(launch(broadcast_bias_kernel, row_blocks(N), kThreads, 0, stream, out, bias, N, OC));
}

void add_bias(cudaStream_t stream, float* out, const float* bias, int64_t N, int64_t OC) {
  if (N <= 0 || OC <= 0) return;
  TRIDENT_CUDA_CHECK(launch(add_bias_kernel, row_blocks(N), kThreads, 0, stream, out, bias, N, OC));
}

void bias_backward(cudaStream_t stream, DeviceAllocator& alloc, float* dbias, const float* dout, int64_t N,
                   int64_t OC) {
  float* const outs[1] = {dbias};
  column_sums<1>(stream, alloc, outs, BiasTerms{dout, OC}, N, OC);
}

// ---------------- Matmul ----------------

Matmul::Matmul(cudaStream_t stream, DeviceAllocator& alloc) : stream_(stream), alloc_(alloc) {
  TRIDENT_CUBLAS_CHECK(cublasLtCreate(&handle_));
  workspace_ = alloc_.allocate(int64_t(kWorkspaceBytes));
}

Matmul::~Matmul() {
  cudaStreamSynchronize(stream_);  // queued GEMMs may still use the descriptors' algorithms / workspace
  for (auto& [key, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.desc);
  }
  if (workspace_) alloc_.release(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

Matmul::Plan& Matmul::plan(const Key& key, const float* bias) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  const bool transa = key[0] != 0, transb = key[1] != 0;
  const int64_t m = key[2], n = key[3], k = key[4], lda = key[5], ldb = key[6], ldc = key[7];
  const bool has_bias = key[8] != 0;
  const auto precision = MatmulPrecision(key[13]);

  Plan p;
  cublasLtMatmulPreference_t pref = nullptr;
  try {
    TRIDENT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, compute_type(precision), CUDA_R_32F));
    const cublasOperation_t opa = transa ? CUBLAS_OP_T : CUBLAS_OP_N, opb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    TRIDENT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    TRIDENT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    if (has_bias) {
      const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      const cudaDataType_t bias_type = CUDA_R_32F;
      TRIDENT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
      TRIDENT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                          sizeof bias_type));
      // The heuristic reads the bias pointer's alignment from the descriptor.
      TRIDENT_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    // Layouts of the stored matrices (before op): A is m x k (or k x m when transposed), etc.
    const cudaDataType_t ab_type = precision == MatmulPrecision::BF16 ? CUDA_R_16BF : CUDA_R_32F;
    TRIDENT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, ab_type, uint64_t(transa ? k : m),
                                                    uint64_t(transa ? m : k), lda));
    TRIDENT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, ab_type, uint64_t(transb ? n : k),
                                                    uint64_t(transb ? k : n), ldb));
    TRIDENT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, uint64_t(m), uint64_t(n), ldc));

    TRIDENT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = kWorkspaceBytes;
    TRIDENT_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    const uint32_t align_a = uint32_t(key[9]), align_b = uint32_t(key[10]), align_c = uint32_t(key[11]);
    TRIDENT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                              &align_a, sizeof align_a));
    TRIDENT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                              &align_b, sizeof align_b));
    TRIDENT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                              &align_c, sizeof align_c));
    TRIDENT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                              &align_c, sizeof align_c));

    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &returned);
    TRIDENT_CHECK(st == CUBLAS_STATUS_SUCCESS && returned > 0,
                  "cuBLASLt found no {} algorithm for the GEMM m={} n={} k={} (transa={}, transb={}, lda={}, "
                  "ldb={}, ldc={}, bias={}, alignments A/B/C {}/{}/{}): {}",
                  precision_name(precision), m, n, k, transa, transb, lda, ldb, ldc, has_bias, align_a, align_b,
                  align_c,
                  cublasGetStatusString(st));
    p.algo = result.algo;
    cublasLtMatmulPreferenceDestroy(pref);
  } catch (...) {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (p.a) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b) cublasLtMatrixLayoutDestroy(p.b);
    if (p.c) cublasLtMatrixLayoutDestroy(p.c);
    if (p.desc) cublasLtMatmulDescDestroy(p.desc);
    throw;
  }
  return plans_.emplace(key, p).first->second;
}

Matmul::Operand::~Operand() { alloc->release(copy); }

Matmul::Operand Matmul::operand(const GemmInput& x, int64_t n) {
  if (precision_ != MatmulPrecision::BF16) {
    if (x.values) return Operand{x.values, nullptr, &alloc_};
    float* copy = static_cast<float*>(alloc_.allocate(n * int64_t(sizeof(float))));
    unpack_bf16(stream_, copy, x.bf16, n);
    return Operand{copy, copy, &alloc_};
  }
  // Patterns less aligned than a vector load are copied into an aligned block rather than handed to
  // cuBLASLt as they are, whose kernels for such operands may be slow or absent.
  if (x.bf16 && alignment_of(x.bf16) >= kDirectPatternAlignment) return Operand{x.bf16, nullptr, &alloc_};
  void* copy = alloc_.allocate(n * int64_t(sizeof(uint16_t)));
  if (x.bf16) {
    TRIDENT_CUDA_CHECK(cudaMemcpyAsync(copy, x.bf16, size_t(n) * sizeof(uint16_t), cudaMemcpyDeviceToDevice, stream_));
  } else {
    const unsigned blocks = unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
    TRIDENT_CUDA_CHECK(
        launch(to_bf16_kernel, blocks, kThreads, 0, stream_, static_cast<uint16_t*>(copy), x.values, n));
  }
  return Operand{copy, copy, &alloc_};
}

void Matmul::gemm(bool transa, bool transb, int64_t m, int64_t n, int64_t k, const void* A, int64_t lda,
                  const void* B, int64_t ldb, float* C, int64_t ldc, float beta, const float* bias) {
  const Key key{transa, transb, m, n, k, lda, ldb, ldc, bias != nullptr, alignment_of(A), alignment_of(B),
                alignment_of(C), bias ? alignment_of(bias) : 0, int64_t(precision_)};
  Plan& p = plan(key, bias);
  if (bias) {  // the cached descriptor serves every bias of this alignment class
    TRIDENT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  }
  const float alpha = 1.0f;
  TRIDENT_CUBLAS_CHECK(cublasLtMatmul(handle_, p.desc, &alpha, A, p.a, B, p.b, &beta, C, p.c, C, p.c, &p.algo,
                                      workspace_, kWorkspaceBytes, stream_));
}

void Matmul::forward(float* out, GemmInput inp, GemmInput weight, const float* bias, int64_t N, int64_t IC,
                     int64_t OC) {
  if (N <= 0 || OC <= 0) return;
  if (IC <= 0) {  // an empty sum: out = bias (or 0)
    broadcast_bias(stream_, out, bias, N, OC);
    return;
  }
  const bool epilogue = bias != nullptr && alignment_of(bias) >= kEpilogueBiasAlignment;
  const Operand w = operand(weight, OC * IC), x = operand(inp, N * IC);
  gemm(true, false, OC, N, IC, w.data, IC, x.data, IC, out, OC, 0.0f, epilogue ? bias : nullptr);
  if (bias != nullptr && !epilogue) add_bias(stream_, out, bias, N, OC);
}

void Matmul::backward(float* dinp, float* dweight, float* dbias, const float* dout, GemmInput inp,
                      GemmInput weight, int64_t N, int64_t IC, int64_t OC, GradWrite dinp_write) {
  const bool overwrite = dinp_write == GradWrite::Overwrite;
  if (N <= 0 || OC <= 0) {  // every gradient is an empty sum: added, nothing changes; written, dinp = 0
    if (dinp && overwrite) fill(stream_, dinp, 0.0f, N * IC);
    return;
  }
  if (IC > 0 && (dinp || dweight)) {
    const Operand d = operand(dout, N * OC);  // converted once for both GEMMs
    if (dinp) {
      const Operand w = operand(weight, OC * IC);
      gemm(false, false, IC, N, OC, w.data, IC, d.data, OC, dinp, IC, overwrite ? 0.0f : 1.0f, nullptr);
    }
    if (dweight) {
      const Operand x = operand(inp, N * IC);
      gemm(false, true, IC, OC, N, x.data, IC, d.data, OC, dweight, IC, 1.0f, nullptr);
    }
  }
  if (dbias) bias_backward(stream_, alloc_, dbias, dout, N, OC);
}

}  // namespace trident::cuda
