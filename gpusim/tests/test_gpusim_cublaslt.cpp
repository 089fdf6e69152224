// gpu-sim's cuBLASLt against cuBLASLt's documented semantics: D = epilogue(alpha op(A) op(B) + beta C)
// for every transpose combination on non-square shapes with padded leading dimensions, out of place
// and in place, batched, fp32 and fp64; the fast compute types (A and B rounded to bf16 or TF32); bf16
// A and B with fp32 or bf16 C and D (bf16 D: the fp32 result rounded once, expect_rounded_within); the
// epilogues; the heuristic's alignment and workspace records and what cublasLtMatmul checks against
// them; the validation statuses; stream order; and the device fault for an operand the GPU cannot
// reach. Expected values are naive loops in double; fp32 results must agree to 1e-5 * (k + 1) (operands
// in [-1, 1], so each term is at most 1 in magnitude), fp64 to 1e-12 * (k + 1), the fast types to the
// bound of fp32 accumulation stated at fast_bound. Tests that fault a device use one of their own (a
// fault is sticky).
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>
#include <thread>
#include <vector>

#include "device_fixture.hpp"

namespace {

constexpr cublasStatus_t kOk = CUBLAS_STATUS_SUCCESS;
constexpr size_t kWorkspaceBytes = size_t(1) << 20;

template <class T>
std::vector<T> random_values(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<T> v(n);
  for (auto& x : v) x = T(u(rng));
  return v;
}

// A column-major GEMM: op(A) m x k, op(B) k x n, C and D m x n. Every leading dimension exceeds its
// rows (by `pad`, D's by one more than C's) so that padding must be left alone and C's layout is not
// D's; each batch entry is a further `gap` elements apart.
struct Case {
  bool ta = false, tb = false;
  int m = 5, n = 7, k = 3;
  int pad = 3;
  int batch = 1;
  int64_t gap = 11;
  int a_rows() const { return ta ? k : m; }
  int a_cols() const { return ta ? m : k; }
  int b_rows() const { return tb ? n : k; }
  int b_cols() const { return tb ? k : n; }
  int64_t lda() const { return a_rows() + pad; }
  int64_t ldb() const { return b_rows() + pad; }
  int64_t ldc() const { return m + pad; }
  int64_t ldd() const { return m + pad + 1; }
  int64_t stride_a() const { return lda() * a_cols() + gap; }
  int64_t stride_b() const { return ldb() * b_cols() + gap; }
  int64_t stride_c() const { return ldc() * n + gap; }
  int64_t stride_d() const { return ldd() * n + gap; }
  size_t size_a() const { return size_t(stride_a() * batch); }
  size_t size_b() const { return size_t(stride_b() * batch); }
  size_t size_c() const { return size_t(stride_c() * batch); }
  size_t size_d() const { return size_t(stride_d() * batch); }
};

template <class T>
double op_a(const Case& g, const std::vector<T>& A, int b, int i, int kk) {
  return g.ta ? A[b * g.stride_a() + kk + i * g.lda()] : A[b * g.stride_a() + i + kk * g.lda()];
}
template <class T>
double op_b(const Case& g, const std::vector<T>& B, int b, int kk, int j) {
  return g.tb ? B[b * g.stride_b() + j + kk * g.ldb()] : B[b * g.stride_b() + kk + j * g.ldb()];
}

// alpha * op(A) op(B) + beta * C for batch entry b, element (i, j), in double.
template <class T>
double reference(const Case& g, const std::vector<T>& A, const std::vector<T>& B, const std::vector<T>& C, double alpha,
                 double beta, int b, int i, int j) {
  double sum = 0;
  for (int kk = 0; kk < g.k; ++kk) sum += op_a(g, A, b, i, kk) * op_b(g, B, b, kk, j);
  return alpha * sum + (beta != 0 ? beta * double(C[b * g.stride_c() + i + j * g.ldc()]) : 0.0);
}

double tolerance(const Case& g, bool fp64 = false) { return (fp64 ? 1e-12 : 1e-5) * (g.k + 1); }

double gelu(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::acos(-1.0)) * (x + 0.044715 * x * x * x))); }

// Descriptor, layouts and preference for a Case (preference: 1 MiB of workspace, default alignments).
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;

  explicit Plan(const Case& g, cudaDataType type = CUDA_R_32F, cublasComputeType_t compute = CUBLAS_COMPUTE_32F,
                cudaDataType scale = CUDA_R_32F) {
    EXPECT_EQ(cublasLtMatmulDescCreate(&desc, compute, scale), kOk);
    set(CUBLASLT_MATMUL_DESC_TRANSA, int32_t(g.ta ? CUBLAS_OP_T : CUBLAS_OP_N));
    set(CUBLASLT_MATMUL_DESC_TRANSB, int32_t(g.tb ? CUBLAS_OP_T : CUBLAS_OP_N));
    layout(&a, type, g.a_rows(), g.a_cols(), g.lda(), g.batch, g.stride_a());
    layout(&b, type, g.b_rows(), g.b_cols(), g.ldb(), g.batch, g.stride_b());
    layout(&c, type, g.m, g.n, g.ldc(), g.batch, g.stride_c());
    layout(&d, type, g.m, g.n, g.ldd(), g.batch, g.stride_d());
    EXPECT_EQ(cublasLtMatmulPreferenceCreate(&pref), kOk);
    prefer(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(kWorkspaceBytes));
  }
  ~Plan() {
    cublasLtMatmulPreferenceDestroy(pref);
    for (auto l : {a, b, c, d}) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(desc);
  }
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  static void layout(cublasLtMatrixLayout_t* l, cudaDataType type, int rows, int cols, int64_t ld, int32_t batch,
                     int64_t stride) {
    EXPECT_EQ(cublasLtMatrixLayoutCreate(l, type, uint64_t(rows), uint64_t(cols), ld), kOk);
    if (batch == 1) return;
    EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch), kOk);
    EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
              kOk);
  }
  template <class V>
  cublasStatus_t set(cublasLtMatmulDescAttributes_t attr, const V& v) {
    return cublasLtMatmulDescSetAttribute(desc, attr, &v, sizeof v);
  }
  template <class V>
  void prefer(cublasLtMatmulPreferenceAttributes_t attr, const V& v) {
    EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, attr, &v, sizeof v), kOk);
  }
  void prefer_alignment(uint32_t bytes) {
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      prefer(attr, bytes);
  }
  cublasStatus_t heuristic(cublasLtHandle_t h, cublasLtMatmulHeuristicResult_t& r, int* count = nullptr) {
    int returned = -1;
    const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(h, desc, a, b, c, d, pref, 1, &r, &returned);
    if (count) *count = returned;
    if (s == kOk) {
      EXPECT_EQ(returned, 1);
    }
    return s;
  }
};

class Lt : public gpusim_test::DeviceFixture {
 protected:
  explicit Lt(int device = 0) : DeviceFixture(device) {}
  void start_library() override {
    ASSERT_EQ(cublasLtCreate(&handle), kOk);
    workspace = device_bytes(kWorkspaceBytes);
  }
  void release_library() override {
    if (handle) cublasLtDestroy(handle);
  }
  cublasLtMatmulAlgo_t algo_for(Plan& plan) {
    cublasLtMatmulHeuristicResult_t r{};
    EXPECT_EQ(plan.heuristic(handle, r), kOk);
    return r.algo;
  }
  template <class S>
  cublasStatus_t matmul(Plan& p, S alpha, const void* A, const void* B, S beta, const void* C, void* D,
                        const cublasLtMatmulAlgo_t* algo, size_t workspace_bytes = kWorkspaceBytes) {
    return cublasLtMatmul(handle, p.desc, &alpha, A, p.a, B, p.b, &beta, C, p.c, D, p.d, algo, workspace,
                          workspace_bytes, stream);
  }

  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
};

// Tests that fault a device pick it themselves (use_device).
class LtFault : public Lt {
 protected:
  LtFault() : Lt(-1) {}
};

// Host operands of a Case; D starts as a sentinel so that untouched padding can be told.
template <class T>
struct Operands {
  std::vector<T> A, B, C, D;
  explicit Operands(const Case& g)
      : A(random_values<T>(g.size_a(), 1)),
        B(random_values<T>(g.size_b(), 2)),
        C(random_values<T>(g.size_c(), 3)),
        D(g.size_d(), T(7)) {}
};

// D (batch entries and padding) against the reference; padding and gaps must keep the sentinel.
template <class T>
void expect_d(const Case& g, const Operands<T>& h, const std::vector<T>& D, double alpha, double beta,
              bool fp64 = false) {
  for (int b = 0; b < g.batch; ++b)
    for (int j = 0; j < g.n; ++j)
      for (int64_t i = 0; i < g.ldd(); ++i) {
        const T got = D[size_t(b * g.stride_d() + i + j * g.ldd())];
        if (i < g.m)
          ASSERT_NEAR(got, reference(g, h.A, h.B, h.C, alpha, beta, b, int(i), j), tolerance(g, fp64))
              << "batch " << b << " D(" << i << "," << j << ") ta=" << g.ta << " tb=" << g.tb;
        else
          ASSERT_EQ(got, T(7)) << "padding row " << i << " of column " << j << " was written";
      }
}

// ---- the GEMM ----

TEST_F(Lt, EveryTransposeCombinationOutOfPlaceWithAlphaAndBeta) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      Case g;
      g.ta = ta;
      g.tb = tb;
      Operands<float> h(g);
      Plan plan(g);
      const cublasLtMatmulAlgo_t algo = algo_for(plan);
      const float* A = to_device(h.A);
      const float* B = to_device(h.B);
      const float* C = to_device(h.C);
      float* D = to_device(h.D);
      ASSERT_EQ(matmul(plan, 1.5f, A, B, -0.5f, C, D, &algo), kOk);
      expect_d(g, h, to_host(D, g.size_d()), 1.5, -0.5);
      EXPECT_EQ(to_host(C, g.size_c()), h.C) << "C is read-only when C != D";
    }
}

TEST_F(Lt, InPlaceAccumulatesIntoC) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      Case g;
      g.ta = ta;
      g.tb = tb;
      g.m = 6;
      g.n = 4;
      g.k = 9;
      Operands<float> h(g);
      Plan plan(g);
      // In place: C's layout is D's.
      const int64_t ld = g.ldd();
      ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(plan.c, CUBLASLT_MATRIX_LAYOUT_LD, &ld, sizeof ld), kOk);
      const cublasLtMatmulAlgo_t algo = algo_for(plan);
      std::vector<float> cd = random_values<float>(g.size_d(), 4);
      float* D = to_device(cd);
      ASSERT_EQ(matmul(plan, 1.0f, to_device(h.A), to_device(h.B), 1.0f, D, D, &algo), kOk);
      const std::vector<float> got = to_host(D, g.size_d());
      for (int j = 0; j < g.n; ++j)
        for (int i = 0; i < g.m; ++i) {
          const double expect = reference(g, h.A, h.B, h.C, 1.0, 0.0, 0, i, j) + cd[size_t(i + j * g.ldd())];
          ASSERT_NEAR(got[size_t(i + j * g.ldd())], expect, tolerance(g)) << i << "," << j;
        }
    }
}

TEST_F(Lt, BetaZeroNeverReadsC) {
  Case g;
  Operands<float> h(g);
  Plan plan(g);
  const cublasLtMatmulAlgo_t algo = algo_for(plan);
  const float* A = to_device(h.A);
  const float* B = to_device(h.B);
  auto* nan_c = static_cast<float*>(device_bytes(g.size_c() * sizeof(float)));  // cudaMalloc: NaN bytes here
  float* D = to_device(h.D);
  ASSERT_EQ(matmul(plan, 2.0f, A, B, 0.0f, nan_c, D, &algo), kOk);
  expect_d(g, h, to_host(D, g.size_d()), 2.0, 0.0);
  float* D2 = to_device(h.D);
  ASSERT_EQ(matmul(plan, 2.0f, A, B, 0.0f, nullptr, D2, &algo), kOk) << "C may be null when beta is 0";
  expect_d(g, h, to_host(D2, g.size_d()), 2.0, 0.0);
}

TEST_F(Lt, StridedBatchesAreIndependent) {
  Case g;
  g.ta = true;
  g.batch = 3;
  Operands<float> h(g);
  Plan plan(g);
  const cublasLtMatmulAlgo_t algo = algo_for(plan);
  float* D = to_device(h.D);
  ASSERT_EQ(matmul(plan, 0.75f, to_device(h.A), to_device(h.B), 0.25f, to_device(h.C), D, &algo), kOk);
  expect_d(g, h, to_host(D, g.size_d()), 0.75, 0.25);
}

TEST_F(Lt, Fp64) {
  Case g;
  g.tb = true;
  g.k = 17;
  Operands<double> h(g);
  Plan plan(g, CUDA_R_64F, CUBLAS_COMPUTE_64F, CUDA_R_64F);
  const cublasLtMatmulAlgo_t algo = algo_for(plan);
  double* D = to_device(h.D);
  ASSERT_EQ(matmul(plan, 1.25, to_device(h.A), to_device(h.B), -1.0, to_device(h.C), D, &algo), kOk);
  expect_d(g, h, to_host(D, g.size_d()), 1.25, -1.0, true);
}

TEST_F(Lt, DevicePointerModeReadsAlphaAndBetaWhenItRuns) {
  Case g;
  Operands<float> h(g);
  Plan plan(g);
  ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_POINTER_MODE, int32_t(CUBLASLT_POINTER_MODE_DEVICE)), kOk);
  const cublasLtMatmulAlgo_t algo = algo_for(plan);
  float* scalars = to_device(std::vector<float>{3.0f, 0.5f});
  float* D = to_device(h.D);
  ASSERT_EQ(cublasLtMatmul(handle, plan.desc, scalars, to_device(h.A), plan.a, to_device(h.B), plan.b, scalars + 1,
                           to_device(h.C), plan.c, D, plan.d, &algo, workspace, kWorkspaceBytes, stream),
            kOk);
  expect_d(g, h, to_host(D, g.size_d()), 3.0, 0.5);
}

TEST_F(Lt, PageLockedHostOperandsAreDeviceAccessible) {
  Case g;
  Operands<float> h(g);
  Plan plan(g);
  plan.prefer_alignment(16);
  const cublasLtMatmulAlgo_t algo = algo_for(plan);
  float* pinned_b = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned_b, g.size_b() * sizeof(float)), cudaSuccess);
  std::memcpy(pinned_b, h.B.data(), g.size_b() * sizeof(float));
  float* D = to_device(h.D);
  ASSERT_EQ(matmul(plan, 1.0f, to_device(h.A), pinned_b, 1.0f, to_device(h.C), D, &algo), kOk);
  expect_d(g, h, to_host(D, g.size_d()), 1.0, 1.0);
  EXPECT_EQ(cudaFreeHost(pinned_b), cudaSuccess);
}

// ---- the fast compute types: A and B rounded to bf16 or TF32, the rest fp32 ----

struct FastType {
  cublasComputeType_t compute;
  int significant_bits;  // bf16: 8, TF32: 11
};
const FastType kFastTypes[] = {{CUBLAS_COMPUTE_32F_FAST_16BF, 8}, {CUBLAS_COMPUTE_32F_FAST_TF32, 11}};

// The test's own rounding, in double arithmetic (not gpu-sim's bit-pattern formulation): x rounded to
// `bits` significant bits within float's exponent range (below 2^-126 the spacing stays that of
// [2^-126, 2^-125), as for denormals), to nearest, ties to even (nearbyint in the default rounding
// mode); past the format's largest finite value, Inf. NaN, Inf and zero are returned as they are.
float round_to_bits(float x, int bits) {
  if (!std::isfinite(x) || x == 0) return x;
  int exponent = 0;
  std::frexp(x, &exponent);  // |x| = f * 2^exponent, f in [0.5, 1)
  const double spacing = std::ldexp(1.0, std::max(exponent, -125) - bits);
  const double rounded = std::nearbyint(double(x) / spacing) * spacing;
  const double largest = std::ldexp(2.0 - std::ldexp(1.0, 1 - bits), 127);
  return std::fabs(rounded) > largest ? std::copysign(INFINITY, x) : float(rounded);
}

std::vector<float> rounded(std::vector<float> v, int bits) {
  for (float& x : v) x = round_to_bits(x, bits);
  return v;
}

// The bound for a fast type's D against the exact value (in double) on the rounded operands. Products
// of operands with at most 11 significant bits are exact in fp32, so only the GEMM's fp32 roundings
// remain: at most k + 4 on any term (k - 1 sums, alpha, beta * C, adding the two, the bias), each at
// most 2^-24 relative, so |error| <= (k + 4) 2^-24 (|alpha| sum_k |op(A) op(B)| + others) to first
// order, `others` being |beta C| + |bias| of the element. The bound is twice that.
double fast_bound(const Case& g, const std::vector<float>& A, const std::vector<float>& B, double alpha, double others,
                  int b, int i, int j) {
  double sum = 0;
  for (int kk = 0; kk < g.k; ++kk) sum += std::fabs(op_a(g, A, b, i, kk) * op_b(g, B, b, kk, j));
  return 2 * (g.k + 4) * std::ldexp(1.0, -24) * (std::fabs(alpha) * sum + others);
}

// The cases of the fast types and of bf16 operands: every transpose, k 19, two batch entries; the GEMM
// is D = 1.25 op(A) op(B) - 0.75 C + bias (the BIAS epilogue).
constexpr double kFastAlpha = 1.25, kFastBeta = -0.75;

Case fast_case(bool ta, bool tb) {
  Case g;
  g.ta = ta;
  g.tb = tb;
  g.m = 6;
  g.n = 5;
  g.k = 19;
  g.batch = 2;
  return g;
}

// The pointwise epilogues' case (fp32 and bf16): A transposed, 9 x 6, k 8.
Case epilogue_case() {
  Case g;
  g.ta = true;
  g.m = 9;
  g.n = 6;
  g.k = 8;
  return g;
}

// The bias gradient epilogues' case (fp32 and bf16): 4 x 10, k 13, A and B both transposed or neither.
Case bias_gradient_case(bool trans) {
  Case g;
  g.ta = g.tb = trans;
  g.m = 4;
  g.n = 10;
  g.k = 13;
  return g;
}

// BGRADA's exact element r (the sum over k of op(A)[r, k]) or BGRADB's (of op(B)[k, r]), in double, and
// the sum of the terms' magnitudes into *magnitude when given.
double exact_bias_gradient(const Case& g, const std::vector<float>& A, const std::vector<float>& B, bool on_a, int r,
                           double* magnitude = nullptr) {
  double sum = 0, size = 0;
  for (int kk = 0; kk < g.k; ++kk) {
    const double x = on_a ? op_a(g, A, 0, r, kk) : op_b(g, B, 0, kk, r);
    sum += x;
    size += std::fabs(x);
  }
  if (magnitude) *magnitude = size;
  return sum;
}

// D against the double reference on ra and rb (the operands as the GEMM multiplies them), within
// fast_bound; padding rows keep the sentinel.
void expect_fast_d(const Case& g, const Operands<float>& h, const std::vector<float>& ra, const std::vector<float>& rb,
                   const std::vector<float>& bias, const std::vector<float>& got, const std::string& what) {
  for (int b = 0; b < g.batch; ++b)
    for (int j = 0; j < g.n; ++j)
      for (int i = 0; i < g.ldd(); ++i) {
        const float d = got[size_t(b * g.stride_d() + i + j * g.ldd())];
        if (i >= g.m) {
          ASSERT_EQ(d, 7.0f) << "padding row " << i << " of column " << j << " was written";
          continue;
        }
        const double c = h.C[size_t(b * g.stride_c() + i + j * g.ldc())], bias_i = bias[size_t(i)];
        ASSERT_NEAR(d, reference(g, ra, rb, h.C, kFastAlpha, kFastBeta, b, i, j) + bias_i,
                    fast_bound(g, ra, rb, kFastAlpha, std::fabs(kFastBeta * c) + std::fabs(bias_i), b, i, j))
            << what << " batch " << b << " D(" << i << "," << j << ") ta=" << g.ta << " tb=" << g.tb;
      }
}

TEST_F(Lt, FastComputeTypesRoundAAndBButNotCOrTheBias) {
  for (const FastType& t : kFastTypes)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const Case g = fast_case(ta, tb);
        Operands<float> h(g);
        const std::vector<float> bias = random_values<float>(size_t(g.m), 5);
        Plan plan(g, CUDA_R_32F, t.compute);
        ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_BIAS)), kOk);
        ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(to_device(bias))), kOk);
        const cublasLtMatmulAlgo_t algo = algo_for(plan);
        const float* A = to_device(h.A);
        const float* B = to_device(h.B);
        float* D = to_device(h.D);
        ASSERT_EQ(matmul(plan, float(kFastAlpha), A, B, float(kFastBeta), to_device(h.C), D, &algo), kOk);
        expect_fast_d(g, h, rounded(h.A, t.significant_bits), rounded(h.B, t.significant_bits), bias,
                      to_host(D, g.size_d()), "compute type " + std::to_string(t.compute));
        EXPECT_EQ(to_host(A, g.size_a()), h.A) << "A is rounded into scratch, not in place";
        EXPECT_EQ(to_host(B, g.size_b()), h.B) << "B is rounded into scratch, not in place";
      }
}

std::vector<uint16_t> bf16_patterns(const std::vector<float>& v) {
  std::vector<uint16_t> p(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v[i], sizeof bits);
    p[i] = uint16_t(bits >> 16);
  }
  return p;
}

float bf16_value(uint16_t bits) {
  const uint32_t u = uint32_t(bits) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// bfloat16 A and B with fp32 C and D under CUBLAS_COMPUTE_32F (what trident's bf16 GEMMs use): each
// bf16 value is exact in fp32, so D is the fp32 GEMM of the widened operands, within fast_bound of the
// double reference.
TEST_F(Lt, Bf16OperandsWithFp32OutputAreWidenedExactly) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Case g = fast_case(ta, tb);
      Operands<float> h(g);
      h.A = rounded(h.A, 8);  // bf16 values, so that the widened patterns are the operands themselves
      h.B = rounded(h.B, 8);
      const std::vector<float> bias = random_values<float>(size_t(g.m), 5);
      Plan plan(g);
      const uint32_t bf16 = CUDA_R_16BF;
      for (auto layout : {plan.a, plan.b})
        ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_TYPE, &bf16, sizeof bf16), kOk);
      ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_BIAS)), kOk);
      ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(to_device(bias))), kOk);
      const cublasLtMatmulAlgo_t algo = algo_for(plan);
      float* D = to_device(h.D);
      ASSERT_EQ(matmul(plan, float(kFastAlpha), to_device(bf16_patterns(h.A)), to_device(bf16_patterns(h.B)),
                       float(kFastBeta), to_device(h.C), D, &algo),
                kOk);
      expect_fast_d(g, h, h.A, h.B, bias, to_host(D, g.size_d()), "bf16 A and B");
    }
}

// ---- bfloat16 A, B, C and D ----

// A stored bf16 element against an exact value known to within `bound` before the one rounding to
// bfloat16: round to nearest even is monotonic, so it lies between the roundings of the interval's ends.
void expect_rounded_within(uint16_t got, double exact, double bound, const std::string& where) {
  const float lo = round_to_bits(float(exact - bound), 8), hi = round_to_bits(float(exact + bound), 8);
  const float d = bf16_value(got);
  ASSERT_TRUE(d >= lo && d <= hi) << where << ": " << d << " outside [" << lo << ", " << hi << "], exact " << exact
                                  << " +- " << bound;
}

constexpr uint16_t kBf16Sentinel = 0x4000;  // 2.0

// bf16 everywhere under CUBLAS_COMPUTE_32F (what llm.c and autocast run): D is the fp32 result (within
// fast_bound of the exact value on the bf16 operands) rounded to nearest even once; the bias is bf16
// (D's type); in place (C is D) and out of place; padding untouched.
TEST_F(Lt, Bf16OutputIsTheFp32ResultRoundedOnce) {
  for (bool in_place : {false, true})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        Case g = fast_case(ta, tb);
        Operands<float> h(g);
        h.A = rounded(h.A, 8);
        h.B = rounded(h.B, 8);
        h.C = rounded(h.C, 8);
        const std::vector<float> bias = rounded(random_values<float>(size_t(g.m), 5), 8);
        Plan plan(g, CUDA_R_16BF, CUBLAS_COMPUTE_32F);
        if (in_place) {  // C takes D's layout
          ASSERT_EQ(cublasLtMatrixLayoutDestroy(plan.c), kOk);
          Plan::layout(&plan.c, CUDA_R_16BF, g.m, g.n, g.ldd(), g.batch, g.stride_d());
          h.C.resize(g.size_d());
          for (size_t i = 0; i < h.C.size(); ++i) {  // D's padding rows and batch gaps hold the sentinel
            const int64_t at = int64_t(i) % g.stride_d();
            if (at >= g.ldd() * g.n || at % g.ldd() >= g.m) h.C[i] = 2.0f;
          }
        }
        ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_BIAS)), kOk);
        ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(to_device(bf16_patterns(bias)))),
                  kOk);
        const cublasLtMatmulAlgo_t algo = algo_for(plan);
        uint16_t* C = to_device(bf16_patterns(h.C));
        uint16_t* D = in_place ? C : to_device(std::vector<uint16_t>(g.size_d(), kBf16Sentinel));
        ASSERT_EQ(matmul(plan, float(kFastAlpha), to_device(bf16_patterns(h.A)), to_device(bf16_patterns(h.B)),
                         float(kFastBeta), C, D, &algo),
                  kOk);
        const std::vector<uint16_t> got = to_host(D, g.size_d());
        const int64_t ldc = in_place ? g.ldd() : g.ldc(), stride_c = in_place ? g.stride_d() : g.stride_c();
        for (int b = 0; b < g.batch; ++b)
          for (int j = 0; j < g.n; ++j)
            for (int i = 0; i < g.ldd(); ++i) {
              const uint16_t d = got[size_t(b * g.stride_d() + i + j * g.ldd())];
              const std::string where = "in_place " + std::to_string(in_place) + " ta " + std::to_string(ta) + " tb " +
                                        std::to_string(tb) + " batch " + std::to_string(b) + " D(" +
                                        std::to_string(i) + "," + std::to_string(j) + ")";
              if (i >= g.m) {
                ASSERT_EQ(d, kBf16Sentinel) << where << ": padding was written";
                continue;
              }
              double sum = 0;
              for (int kk = 0; kk < g.k; ++kk) sum += op_a(g, h.A, b, i, kk) * op_b(g, h.B, b, kk, j);
              const double c = h.C[size_t(b * stride_c + i + j * ldc)];
              const double exact = kFastAlpha * sum + kFastBeta * c + bias[size_t(i)];
              expect_rounded_within(
                  d, exact,
                  fast_bound(g, h.A, h.B, kFastAlpha, std::fabs(kFastBeta * c) + std::fabs(bias[size_t(i)]), b, i, j),
                  where);
            }
      }
}

// GELU_AUX_BIAS with bf16 D, bias and aux (the fused MLP activation): aux is the pre-activation x
// rounded once, D is gelu of the fp32 x (not of the rounded aux) rounded once. |gelu'| < 1.13, and
// fp32's tanh-formula evaluation adds a few ulps: the bound on D before its rounding is 1.2 times x's
// plus 8 ulps of fp32 at |x| + 1.
TEST_F(Lt, Bf16GeluAuxEpilogueRoundsTheActivationAndItsInput) {
  const Case g = epilogue_case();
  Operands<float> h(g);
  h.A = rounded(h.A, 8);
  h.B = rounded(h.B, 8);
  const std::vector<float> bias = rounded(random_values<float>(size_t(g.m), 5), 8);
  const int64_t aux_ld = 16;
  Plan plan(g, CUDA_R_16BF, CUBLAS_COMPUTE_32F);
  uint16_t* aux_d = to_device(std::vector<uint16_t>(size_t(aux_ld * g.n), kBf16Sentinel));
  ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_GELU_AUX_BIAS)), kOk);
  ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(to_device(bf16_patterns(bias)))), kOk);
  ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(aux_d)), kOk);
  ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld), kOk);
  const cublasLtMatmulAlgo_t algo = algo_for(plan);
  uint16_t* D = to_device(std::vector<uint16_t>(g.size_d(), kBf16Sentinel));
  ASSERT_EQ(matmul(plan, 1.0f, to_device(bf16_patterns(h.A)), to_device(bf16_patterns(h.B)), 0.0f,
                   static_cast<const void*>(nullptr), D, &algo),
            kOk);
  const std::vector<uint16_t> got = to_host(D, g.size_d()), aux = to_host(aux_d, size_t(aux_ld * g.n));
  for (int j = 0; j < g.n; ++j)
    for (int i = 0; i < g.m; ++i) {
      const std::string where = "(" + std::to_string(i) + "," + std::to_string(j) + ")";
      double sum = 0;
      for (int kk = 0; kk < g.k; ++kk) sum += op_a(g, h.A, 0, i, kk) * op_b(g, h.B, 0, kk, j);
      const double x = sum + bias[size_t(i)];
      const double x_bound = fast_bound(g, h.A, h.B, 1.0, std::fabs(bias[size_t(i)]), 0, i, j);
      expect_rounded_within(aux[size_t(i + j * aux_ld)], x, x_bound, "aux " + where);
      expect_rounded_within(got[size_t(i + j * g.ldd())], gelu(x),
                            1.2 * x_bound + 8 * std::ldexp(1.0, -24) * (std::fabs(x) + 1), "D " + where);
    }
  for (int j = 0; j < g.n; ++j)
    for (int64_t i = g.m; i < aux_ld; ++i) ASSERT_EQ(aux[size_t(i + j * aux_ld)], kBf16Sentinel) << "aux padding";
}

// A bias gradient epilogue with bf16 D writes the gradient in D's type: the fp32 sum rounded once.
TEST_F(Lt, Bf16BiasGradientIsRoundedOnce) {
  for (cublasLtEpilogue_t epilogue : {CUBLASLT_EPILOGUE_BGRADA, CUBLASLT_EPILOGUE_BGRADB}) {
    const Case g = bias_gradient_case(true);
    Operands<float> h(g);
    h.A = rounded(h.A, 8);
    h.B = rounded(h.B, 8);
    Plan plan(g, CUDA_R_16BF, CUBLAS_COMPUTE_32F);
    const bool on_a = epilogue == CUBLASLT_EPILOGUE_BGRADA;
    const int length = on_a ? g.m : g.n;
    uint16_t* grad = to_device(std::vector<uint16_t>(size_t(length), kBf16Sentinel));
    ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(epilogue)), kOk);
    ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<void*>(grad)), kOk);
    const cublasLtMatmulAlgo_t algo = algo_for(plan);
    uint16_t* D = to_device(std::vector<uint16_t>(g.size_d(), kBf16Sentinel));
    ASSERT_EQ(matmul(plan, 1.0f, to_device(bf16_patterns(h.A)), to_device(bf16_patterns(h.B)), 0.0f,
                     static_cast<const void*>(nullptr), D, &algo),
              kOk);
    const std::vector<uint16_t> got = to_host(grad, size_t(length));
    for (int r = 0; r < length; ++r) {
      double magnitude = 0;
      const double sum = exact_bias_gradient(g, h.A, h.B, on_a, r, &magnitude);
      expect_rounded_within(got[size_t(r)], sum, 2 * g.k * std::ldexp(1.0, -24) * magnitude,
                            "epilogue " + std::to_string(epilogue) + " at " + std::to_string(r));
    }
  }
}

// The rounding cannot silently be skipped: on random operands (low mantissa bits set) the fast types'
// D differs from exact fp32's by far more than fast_bound.
TEST_F(Lt, FastComputeTypesDifferFromExactFp32) {
  Case g;
  g.m = 8;
  g.n = 8;
  g.k = 32;
  Operands<float> h(g);
  const float* A = to_device(h.A);
  const float* B = to_device(h.B);
  auto product = [&](cublasComputeType_t compute) {
    Plan plan(g, CUDA_R_32F, compute);
    const cublasLtMatmulAlgo_t algo = algo_for(plan);
    float* D = to_device(h.D);
    EXPECT_EQ(matmul(plan, 1.0f, A, B, 0.0f, nullptr, D, &algo), kOk);
    return to_host(D, g.size_d());
  };
  const std::vector<float> exact = product(CUBLAS_COMPUTE_32F);
  for (const FastType& t : kFastTypes) {
    const std::vector<float> fast = product(t.compute);
    double difference = 0, bound = 0;
    for (int j = 0; j < g.n; ++j)
      for (int i = 0; i < g.m; ++i) {
        const size_t at = size_t(i + j * g.ldd());
        difference = std::max(difference, std::fabs(double(fast[at]) - double(exact[at])));
        bound = std::max(bound, fast_bound(g, h.A, h.B, 1.0, 0.0, 0, i, j));
      }
    EXPECT_GT(difference, (t.significant_bits == 8 ? 100 : 10) * bound) << "compute type " << t.compute;
  }
}

// Chosen values through a one-column GEMM (D = A * 1, exact): ties to even, just above and below a
// tie, negative values, a carry into the exponent, Inf, NaN (a payload in the low bits must not round
// into Inf, nor 0x7fffffff wrap to -0), the largest finite values, denormals. The expected patterns
// were worked out by hand; the test's own round_to_bits must agree with them too.
TEST_F(Lt, FastComputeTypesRoundEachOperandToNearestEven) {
  constexpr uint32_t kAnyNaN = 0x7fc00000;
  struct Value {
    uint32_t in, bf16, tf32;
  };
  const Value values[] = {
      {0x3f800000, 0x3f800000, 0x3f800000},  // 1
      {0x3f808000, 0x3f800000, 0x3f808000},  // 1 + 2^-8: a bf16 tie, to the even 1
      {0x3f818000, 0x3f820000, 0x3f818000},  // 1 + 3 * 2^-8: a bf16 tie, up to the even 1 + 2^-6
      {0x3f808001, 0x3f810000, 0x3f808000},  // just above the bf16 tie: up
      {0x3f807fff, 0x3f800000, 0x3f808000},  // just below it: down in bf16, up in TF32
      {0x3f801000, 0x3f800000, 0x3f800000},  // 1 + 2^-11: a TF32 tie, to the even 1
      {0x3f803000, 0x3f800000, 0x3f804000},  // 1 + 3 * 2^-11: a TF32 tie, up to the even 1 + 2^-9
      {0x3f801001, 0x3f800000, 0x3f802000},  // just above the TF32 tie: up
      {0xbf818000, 0xbf820000, 0xbf818000},  // negative ties and just above
      {0xbf803000, 0xbf800000, 0xbf804000},
      {0xbf808001, 0xbf810000, 0xbf808000},
      {0x3fffffff, 0x40000000, 0x40000000},  // the carry reaches the exponent: 2
      {0x7f800000, 0x7f800000, 0x7f800000},  // Inf
      {0xff800000, 0xff800000, 0xff800000},  // -Inf
      {0x7f7fffff, 0x7f800000, 0x7f800000},  // FLT_MAX rounds past both formats' largest: Inf
      {0xff7fffff, 0xff800000, 0xff800000},
      {0x7f7f8000, 0x7f800000, 0x7f7f8000},  // a bf16 tie above its largest finite value (odd): Inf
      {0x7f7f7fff, 0x7f7f0000, 0x7f7f8000},  // just below it: bf16's largest finite value
      {0x7f7fe000, 0x7f800000, 0x7f7fe000},  // TF32's largest finite value
      {0x7f7ff000, 0x7f800000, 0x7f800000},  // a TF32 tie above it (odd): Inf
      {0x00000000, 0x00000000, 0x00000000},
      {0x00000001, 0x00000000, 0x00000000},  // the smallest denormal: to zero
      {0x00008000, 0x00000000, 0x00008000},  // a bf16 tie between 0 and its smallest denormal
      {0x00018000, 0x00020000, 0x00018000},  // a bf16 tie between denormals, up to the even one
      {0x80018001, 0x80020000, 0x80018000},  // a negative denormal
      {0x00003000, 0x00000000, 0x00004000},  // a TF32 tie between denormals
      {0x007fffff, 0x00800000, 0x00800000},  // the largest denormal rounds up to the smallest normal
      {0x7fc00000, kAnyNaN, kAnyNaN},        // quiet NaN
      {0x7f800001, kAnyNaN, kAnyNaN},        // signaling NaN, payload in the low bits only
      {0x7fffffff, kAnyNaN, kAnyNaN},
      {0xff800001, kAnyNaN, kAnyNaN},
  };
  const auto from_bits = [](uint32_t bits) {
    float x;
    std::memcpy(&x, &bits, sizeof x);
    return x;
  };
  const auto bits_of = [](float x) {
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    return bits;
  };
  Case g;
  g.m = int(std::size(values));
  g.n = 1;
  g.k = 1;
  std::vector<float> a(g.size_a(), 0.0f);
  for (size_t i = 0; i < std::size(values); ++i) a[i] = from_bits(values[i].in);
  const float* A = to_device(a);
  const float* B = to_device(std::vector<float>(g.size_b(), 1.0f));
  for (const FastType& t : kFastTypes) {
    Plan plan(g, CUDA_R_32F, t.compute);
    const cublasLtMatmulAlgo_t algo = algo_for(plan);
    float* D = to_device(std::vector<float>(g.size_d(), 7.0f));
    ASSERT_EQ(matmul(plan, 1.0f, A, B, 0.0f, nullptr, D, &algo), kOk);
    const std::vector<float> got = to_host(D, g.size_d());
    for (size_t i = 0; i < std::size(values); ++i) {
      const uint32_t want = t.significant_bits == 8 ? values[i].bf16 : values[i].tf32;
      const float mine = round_to_bits(from_bits(values[i].in), t.significant_bits);
      if (want == kAnyNaN) {
        EXPECT_TRUE(std::isnan(got[i])) << std::hex << values[i].in << " gave " << bits_of(got[i]);
        EXPECT_TRUE(std::isnan(mine)) << std::hex << values[i].in;
      } else {
        EXPECT_EQ(bits_of(got[i]), want) << std::hex << values[i].in << " with " << t.significant_bits << " bits";
        EXPECT_EQ(bits_of(mine), want) << std::hex << values[i].in << " by the test's rounding";
      }
    }
  }
}

// ---- epilogues ----

struct EpilogueCase {
  cublasLtEpilogue_t epilogue;
  bool bias, relu, gelu, aux;
};

TEST_F(Lt, PointwiseEpiloguesApplyBiasThenActivation) {
  const EpilogueCase cases[] = {
      {CUBLASLT_EPILOGUE_DEFAULT, false, false, false, false},
      {CUBLASLT_EPILOGUE_BIAS, true, false, false, false},
      {CUBLASLT_EPILOGUE_RELU, false, true, false, false},
      {CUBLASLT_EPILOGUE_RELU_BIAS, true, true, false, false},
      {CUBLASLT_EPILOGUE_GELU, false, false, true, false},
      {CUBLASLT_EPILOGUE_GELU_BIAS, true, false, true, false},
      {CUBLASLT_EPILOGUE_GELU_AUX, false, false, true, true},
      {CUBLASLT_EPILOGUE_GELU_AUX_BIAS, true, false, true, true},
  };
  const Case g = epilogue_case();
  Operands<float> h(g);
  const std::vector<float> bias = random_values<float>(size_t(g.m), 5);
  const int64_t aux_ld = 16;
  for (const EpilogueCase& e : cases) {
    Plan plan(g);
    float* bias_d = to_device(bias);
    float* aux_d = static_cast<float*>(device_bytes(size_t(aux_ld * g.n) * sizeof(float)));
    ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(e.epilogue)), kOk);
    ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t(CUDA_R_32F)), kOk);
    ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias_d)), kOk);
    ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(aux_d)), kOk);
    ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld), kOk);
    const cublasLtMatmulAlgo_t algo = algo_for(plan);
    float* D = to_device(h.D);
    ASSERT_EQ(matmul(plan, 1.0f, to_device(h.A), to_device(h.B), 0.5f, to_device(h.C), D, &algo), kOk);
    const std::vector<float> got = to_host(D, g.size_d());
    const std::vector<float> aux = to_host(aux_d, size_t(aux_ld * g.n));
    for (int j = 0; j < g.n; ++j)
      for (int i = 0; i < g.m; ++i) {
        double x = reference(g, h.A, h.B, h.C, 1.0, 0.5, 0, i, j) + (e.bias ? bias[size_t(i)] : 0.0);
        if (e.aux) {
          ASSERT_NEAR(aux[size_t(i + j * aux_ld)], x, tolerance(g)) << "aux, epilogue " << e.epilogue;
        }
        if (e.relu) x = std::max(x, 0.0);
        if (e.gelu) x = gelu(x);
        ASSERT_NEAR(got[size_t(i + j * g.ldd())], x, tolerance(g))
            << "epilogue " << e.epilogue << " at " << i << "," << j;
      }
  }
}

TEST_F(Lt, BiasGradientEpiloguesSumOverK) {
  for (cublasLtEpilogue_t epilogue : {CUBLASLT_EPILOGUE_BGRADA, CUBLASLT_EPILOGUE_BGRADB})
    for (bool trans : {false, true}) {
      const Case g = bias_gradient_case(trans);
      Operands<float> h(g);
      Plan plan(g);
      const bool on_a = epilogue == CUBLASLT_EPILOGUE_BGRADA;
      const int length = on_a ? g.m : g.n;
      float* grad = to_device(std::vector<float>(size_t(length), 99.0f));
      ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(epilogue)), kOk);
      ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<void*>(grad)), kOk);
      const cublasLtMatmulAlgo_t algo = algo_for(plan);
      float* D = to_device(h.D);
      ASSERT_EQ(matmul(plan, 1.0f, to_device(h.A), to_device(h.B), 1.0f, to_device(h.C), D, &algo), kOk);
      expect_d(g, h, to_host(D, g.size_d()), 1.0, 1.0);
      const std::vector<float> got = to_host(grad, size_t(length));
      for (int r = 0; r < length; ++r) {
        ASSERT_NEAR(got[size_t(r)], exact_bias_gradient(g, h.A, h.B, on_a, r), tolerance(g))
            << "epilogue " << epilogue << " trans " << trans << " at " << r;
      }
    }
}

TEST_F(Lt, UnsimulatedEpiloguesAreNotSupportedAndUnknownOnesInvalid) {
  Case g;
  Plan plan(g);
  cublasLtMatmulHeuristicResult_t r{};
  int count = -1;
  for (cublasLtEpilogue_t e : {CUBLASLT_EPILOGUE_DGELU, CUBLASLT_EPILOGUE_DGELU_BGRAD, CUBLASLT_EPILOGUE_RELU_AUX,
                               CUBLASLT_EPILOGUE_DRELU_BGRAD}) {
    ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(e)), kOk);
    EXPECT_EQ(plan.heuristic(handle, r, &count), CUBLAS_STATUS_NOT_SUPPORTED) << e;
    EXPECT_EQ(count, 0);
  }
  ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(3)), kOk);
  EXPECT_EQ(plan.heuristic(handle, r), CUBLAS_STATUS_INVALID_VALUE);
}

TEST_F(Lt, BiasGradientWithAlphaOtherThanOneIsNotSupported) {
  Case g;
  Plan plan(g);
  float* grad = static_cast<float*>(device_bytes(size_t(g.n) * sizeof(float)));
  ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_BGRADB)), kOk);
  ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<void*>(grad)), kOk);
  const cublasLtMatmulAlgo_t algo = algo_for(plan);
  Operands<float> h(g);
  EXPECT_EQ(matmul(plan, 2.0f, to_device(h.A), to_device(h.B), 0.0f, nullptr, to_device(h.D), &algo),
            CUBLAS_STATUS_NOT_SUPPORTED);
}

// ---- the heuristic and what cublasLtMatmul checks against its algorithm ----

TEST_F(Lt, AlignmentPreferencesDefaultTo256Bytes) {
  Case g;
  Operands<float> h(g);
  Plan plan(g);
  uint32_t align = 0;
  size_t written = 0;
  ASSERT_EQ(cublasLtMatmulPreferenceGetAttribute(plan.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align,
                                                 sizeof align, &written),
            kOk);
  EXPECT_EQ(align, 256u);
  EXPECT_EQ(written, sizeof align);
  const cublasLtMatmulAlgo_t algo = algo_for(plan);
  const float* A = to_device(h.A);
  float* B = static_cast<float*>(device_bytes((g.size_b() + 4) * sizeof(float)));  // cudaMalloc: 256-aligned
  ASSERT_EQ(cudaMemcpy(B + 1, h.B.data(), g.size_b() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  float* D = to_device(h.D);
  EXPECT_EQ(matmul(plan, 1.0f, A, B + 1, 0.0f, nullptr, D, &algo), CUBLAS_STATUS_NOT_SUPPORTED)
      << "B is 4-byte aligned, the algorithm was chosen for 256";
  plan.prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, uint32_t(4));
  const cublasLtMatmulAlgo_t algo4 = algo_for(plan);
  ASSERT_EQ(matmul(plan, 1.0f, A, B + 1, 0.0f, nullptr, D, &algo4), kOk);
  expect_d(g, h, to_host(D, g.size_d()), 1.0, 0.0);
  float* D16 = static_cast<float*>(device_bytes((g.size_d() + 4) * sizeof(float)));
  EXPECT_EQ(matmul(plan, 1.0f, A, B + 1, 0.0f, nullptr, D16 + 4, &algo4), CUBLAS_STATUS_NOT_SUPPORTED)
      << "D 16-byte aligned against the default 256";
  plan.prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, uint32_t(16));
  const cublasLtMatmulAlgo_t algo16 = algo_for(plan);
  EXPECT_EQ(matmul(plan, 1.0f, A, B + 1, 0.0f, nullptr, D16 + 4, &algo16), kOk) << "D 16-byte aligned";
  EXPECT_EQ(matmul(plan, 1.0f, A, B + 1, 0.0f, nullptr, D16 + 2, &algo16), CUBLAS_STATUS_NOT_SUPPORTED)
      << "D 8-byte aligned";
}

TEST_F(Lt, TheBiasAlignmentIsTheDescriptorsPointerAtHeuristicTime) {
  Case g;
  Operands<float> h(g);
  Plan plan(g);
  float* bias = to_device(random_values<float>(size_t(g.m) + 4, 6));
  ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_BIAS)), kOk);
  ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias)), kOk);
  const cublasLtMatmulAlgo_t aligned = algo_for(plan);
  const float* A = to_device(h.A);
  const float* B = to_device(h.B);
  float* D = to_device(h.D);
  ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias + 1)), kOk);
  EXPECT_EQ(matmul(plan, 1.0f, A, B, 0.0f, nullptr, D, &aligned), CUBLAS_STATUS_NOT_SUPPORTED);
  const cublasLtMatmulAlgo_t unaligned = algo_for(plan);
  EXPECT_EQ(matmul(plan, 1.0f, A, B, 0.0f, nullptr, D, &unaligned), kOk);
}

TEST_F(Lt, TheWorkspaceIsReportedRequiredAndUsed) {
  Case g;
  Operands<float> h(g);
  Plan plan(g);
  cublasLtMatmulHeuristicResult_t r{};
  ASSERT_EQ(plan.heuristic(handle, r), kOk);
  EXPECT_EQ(r.state, kOk);
  EXPECT_GT(r.workspaceSize, 0u);
  EXPECT_LE(r.workspaceSize, kWorkspaceBytes);
  const float* A = to_device(h.A);
  const float* B = to_device(h.B);
  float* D = to_device(h.D);
  EXPECT_EQ(matmul(plan, 1.0f, A, B, 0.0f, nullptr, D, &r.algo, r.workspaceSize - 1), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmul(handle, plan.desc, std::vector<float>{1}.data(), A, plan.a, B, plan.b,
                           std::vector<float>{0}.data(), nullptr, plan.c, D, plan.d, &r.algo, nullptr, kWorkspaceBytes,
                           stream),
            CUBLAS_STATUS_INVALID_VALUE)
      << "null workspace";
  ASSERT_EQ(cudaMemset(workspace, 0, kWorkspaceBytes), cudaSuccess);
  ASSERT_EQ(matmul(plan, 1.0f, A, B, 0.0f, nullptr, D, &r.algo, r.workspaceSize), kOk);
  const std::vector<unsigned char> used = to_host(static_cast<unsigned char*>(workspace), r.workspaceSize);
  EXPECT_NE(std::count(used.begin(), used.end(), 0), long(r.workspaceSize)) << "the GEMM writes its workspace";
  // A preference allowing less: an algorithm that needs no workspace, and runs without one.
  plan.prefer(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(r.workspaceSize - 1));
  cublasLtMatmulHeuristicResult_t small{};
  ASSERT_EQ(plan.heuristic(handle, small), kOk);
  EXPECT_EQ(small.workspaceSize, 0u);
  EXPECT_EQ(matmul(plan, 1.0f, A, B, 0.0f, nullptr, D, &small.algo, 0), kOk);
}

TEST_F(Lt, ANullAlgorithmIsChosenImplicitly) {
  Case g;
  Operands<float> h(g);
  Plan plan(g);
  float* D = to_device(h.D);
  ASSERT_EQ(matmul(plan, 1.0f, to_device(h.A), to_device(h.B), -2.0f, to_device(h.C), D, nullptr, 0), kOk);
  expect_d(g, h, to_host(D, g.size_d()), 1.0, -2.0);
}

// ---- validation ----

TEST_F(Lt, NullOrDestroyedHandlesAndDescriptors) {
  Case g;
  Plan plan(g);
  cublasLtMatmulHeuristicResult_t r{};
  int count = 0;
  EXPECT_EQ(
      cublasLtMatmulAlgoGetHeuristic(nullptr, plan.desc, plan.a, plan.b, plan.c, plan.d, plan.pref, 1, &r, &count),
      CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(handle, nullptr, plan.a, plan.b, plan.c, plan.d, plan.pref, 1, &r, &count),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(handle, plan.desc, plan.a, plan.b, plan.c, plan.d, plan.pref, 0, &r, &count),
            CUBLAS_STATUS_INVALID_VALUE)
      << "requestedAlgoCount 0";
  const float one = 1;
  EXPECT_EQ(cublasLtMatmul(nullptr, plan.desc, &one, workspace, plan.a, workspace, plan.b, &one, workspace, plan.c,
                           workspace, plan.d, nullptr, workspace, kWorkspaceBytes, stream),
            CUBLAS_STATUS_NOT_INITIALIZED);
  cublasLtMatrixLayout_t gone = nullptr;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&gone, CUDA_R_32F, 5, 7, 8), kOk);
  ASSERT_EQ(cublasLtMatrixLayoutDestroy(gone), kOk);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(handle, plan.desc, plan.a, plan.b, plan.c, gone, plan.pref, 1, &r, &count),
            CUBLAS_STATUS_INVALID_VALUE);
  cublasLtHandle_t h2 = nullptr;
  ASSERT_EQ(cublasLtCreate(&h2), kOk);
  ASSERT_EQ(cublasLtDestroy(h2), kOk);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(h2, plan.desc, plan.a, plan.b, plan.c, plan.d, plan.pref, 1, &r, &count),
            CUBLAS_STATUS_NOT_INITIALIZED);
}

TEST_F(Lt, DimensionsThatDoNotFitTheOperationsAreInvalid) {
  Case g;
  Operands<float> h(g);
  const float* A = to_device(h.A);
  const float* B = to_device(h.B);
  float* D = to_device(h.D);
  // Each layout in turn gets one row too many; then A is given as if op(A) were m x k untransposed.
  for (int which = 0; which < 5; ++which) {
    Plan plan(g);
    cublasLtMatrixLayout_t layouts[4] = {plan.a, plan.b, plan.c, plan.d};
    if (which < 4) {
      const uint64_t rows = uint64_t(which < 2 ? (which == 0 ? g.a_rows() : g.b_rows()) : g.m) + 1;
      ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(layouts[which], CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof rows), kOk);
    } else {
      ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_TRANSA, int32_t(CUBLAS_OP_T)), kOk);
    }
    cublasLtMatmulHeuristicResult_t r{};
    EXPECT_EQ(plan.heuristic(handle, r), CUBLAS_STATUS_INVALID_VALUE) << "case " << which;
    EXPECT_EQ(matmul(plan, 1.0f, A, B, 0.0f, nullptr, D, nullptr, 0), CUBLAS_STATUS_INVALID_VALUE) << "case " << which;
  }
}

TEST_F(Lt, BadLeadingDimensionsNegativeSizesAndOperationsAreInvalid) {
  Case g;
  const int64_t short_ld = g.a_rows() - 1, negative_ld = -4;
  const uint64_t negative_rows = uint64_t(-5);
  const int32_t bad_op = 7;
  for (int which = 0; which < 4; ++which) {
    Plan plan(g);
    cublasStatus_t set = kOk;
    if (which == 0) set = cublasLtMatrixLayoutSetAttribute(plan.a, CUBLASLT_MATRIX_LAYOUT_LD, &short_ld, 8);
    if (which == 1) set = cublasLtMatrixLayoutSetAttribute(plan.c, CUBLASLT_MATRIX_LAYOUT_LD, &negative_ld, 8);
    if (which == 2) set = cublasLtMatrixLayoutSetAttribute(plan.d, CUBLASLT_MATRIX_LAYOUT_ROWS, &negative_rows, 8);
    if (which == 3) set = plan.set(CUBLASLT_MATMUL_DESC_TRANSB, bad_op);
    ASSERT_EQ(set, kOk) << "cuBLASLt checks values when they are used";
    cublasLtMatmulHeuristicResult_t r{};
    EXPECT_EQ(plan.heuristic(handle, r), CUBLAS_STATUS_INVALID_VALUE) << "case " << which;
  }
}

TEST_F(Lt, OtherTypesAndComputeTypesAreNotSupported) {
  Case g;
  cublasLtMatmulHeuristicResult_t r{};
  int count = -1;
  {
    // bf16 D takes a bias of its own type only (cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE).
    Plan bf16(g, CUDA_R_16BF, CUBLAS_COMPUTE_32F);
    EXPECT_EQ(bf16.heuristic(handle, r), kOk);
    ASSERT_EQ(bf16.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_BIAS)), kOk);
    ASSERT_EQ(bf16.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t(CUDA_R_32F)), kOk);
    EXPECT_EQ(bf16.heuristic(handle, r, &count), CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_EQ(count, 0);
  }
  {
    Plan fp32_d(g, CUDA_R_16BF, CUBLAS_COMPUTE_32F);  // bf16 A, B and C with fp32 D: not a cuBLASLt type set
    const uint32_t f32 = CUDA_R_32F;
    ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(fp32_d.d, CUBLASLT_MATRIX_LAYOUT_TYPE, &f32, sizeof f32), kOk);
    EXPECT_EQ(fp32_d.heuristic(handle, r), CUBLAS_STATUS_NOT_SUPPORTED);
  }
  // The fast types run on fp32 A/B/C/D with an fp32 scale, and only there.
  for (cublasComputeType_t fast : {CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_COMPUTE_32F_FAST_TF32}) {
    {
      Plan fp32(g, CUDA_R_32F, fast);
      EXPECT_EQ(fp32.heuristic(handle, r), kOk) << fast;
    }
    {
      Plan bf16(g, CUDA_R_16BF, fast);
      EXPECT_EQ(bf16.heuristic(handle, r), CUBLAS_STATUS_NOT_SUPPORTED) << fast;
    }
    {
      Plan fp64(g, CUDA_R_64F, fast, CUDA_R_64F);
      EXPECT_EQ(fp64.heuristic(handle, r), CUBLAS_STATUS_NOT_SUPPORTED) << fast;
    }
    {
      Plan scale64(g, CUDA_R_32F, fast, CUDA_R_64F);
      EXPECT_EQ(scale64.heuristic(handle, r), CUBLAS_STATUS_NOT_SUPPORTED) << fast;
    }
    {
      Plan half_c(g, CUDA_R_32F, fast);
      const uint32_t half = CUDA_R_16F;
      ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(half_c.c, CUBLASLT_MATRIX_LAYOUT_TYPE, &half, sizeof half), kOk);
      EXPECT_EQ(half_c.heuristic(handle, r), CUBLAS_STATUS_NOT_SUPPORTED) << fast;
    }
  }
  {
    Plan fast_fp16(g, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_16F);
    EXPECT_EQ(fast_fp16.heuristic(handle, r), CUBLAS_STATUS_NOT_SUPPORTED);
  }
  {
    Plan mixed(g);
    const uint32_t half = CUDA_R_16F;
    ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(mixed.c, CUBLASLT_MATRIX_LAYOUT_TYPE, &half, sizeof half), kOk);
    EXPECT_EQ(mixed.heuristic(handle, r), CUBLAS_STATUS_NOT_SUPPORTED);
  }
  {
    Plan scale64(g, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_64F);
    EXPECT_EQ(scale64.heuristic(handle, r), CUBLAS_STATUS_NOT_SUPPORTED);
  }
}

TEST_F(Lt, AttributesAreCheckedForSizeAndReadBack) {
  Case g;
  Plan plan(g);
  const int64_t op64 = CUBLAS_OP_T;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op64, sizeof op64),
            CUBLAS_STATUS_INVALID_VALUE)
      << "TRANSA is an int32_t";
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, nullptr, 4),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(plan.desc, cublasLtMatmulDescAttributes_t(9999), &op64, 4),
            CUBLAS_STATUS_INVALID_VALUE);
  const cublasOperation_t t = CUBLAS_OP_T;
  ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_TRANSA, t), kOk);
  size_t needed = 0;
  ASSERT_EQ(cublasLtMatmulDescGetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, nullptr, 0, &needed), kOk);
  EXPECT_EQ(needed, sizeof(int32_t));
  EXPECT_EQ(cublasLtMatmulDescGetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  int32_t back = -1;
  ASSERT_EQ(cublasLtMatmulDescGetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &back, sizeof back, nullptr), kOk);
  EXPECT_EQ(back, CUBLAS_OP_T);
  int32_t compute = 0;
  ASSERT_EQ(cublasLtMatmulDescGetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &compute, 4, nullptr), kOk);
  EXPECT_EQ(compute, CUBLAS_COMPUTE_32F);
  uint64_t rows = 0;
  ASSERT_EQ(cublasLtMatrixLayoutGetAttribute(plan.d, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof rows, nullptr), kOk);
  EXPECT_EQ(rows, uint64_t(g.m));
  const int32_t row_major = CUBLASLT_ORDER_ROW;
  EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(plan.a, CUBLASLT_MATRIX_LAYOUT_ORDER, &row_major, sizeof row_major),
            CUBLAS_STATUS_NOT_SUPPORTED);
  int32_t order = -1;
  ASSERT_EQ(cublasLtMatrixLayoutGetAttribute(plan.a, CUBLASLT_MATRIX_LAYOUT_ORDER, &order, 4, nullptr), kOk);
  EXPECT_EQ(order, CUBLASLT_ORDER_COL) << "a refused value leaves the layout as it was";
}

TEST_F(Lt, MatmulRefusesInconsistentOperands) {
  Case g;
  Operands<float> h(g);
  const float* A = to_device(h.A);
  const float* B = to_device(h.B);
  float* C = to_device(h.C);
  float* D = to_device(h.D);
  {
    Plan plan(g);  // C's ld differs from D's
    EXPECT_EQ(matmul(plan, 1.0f, A, B, 1.0f, D, D, nullptr, 0), CUBLAS_STATUS_INVALID_VALUE)
        << "in place, layouts differ";
    EXPECT_EQ(matmul(plan, 1.0f, A, B, 1.0f, nullptr, D, nullptr, 0), CUBLAS_STATUS_INVALID_VALUE) << "null C, beta 1";
    EXPECT_EQ(matmul(plan, 1.0f, nullptr, B, 0.0f, C, D, nullptr, 0), CUBLAS_STATUS_INVALID_VALUE) << "null A";
    cublasLtMatmulAlgo_t zero{};
    EXPECT_EQ(matmul(plan, 1.0f, A, B, 0.0f, C, D, &zero), CUBLAS_STATUS_INVALID_VALUE) << "not a heuristic's algo";
  }
  {
    Plan plan(g);
    ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_BIAS)), kOk);
    EXPECT_EQ(matmul(plan, 1.0f, A, B, 0.0f, C, D, nullptr, 0), CUBLAS_STATUS_INVALID_VALUE) << "no bias pointer";
    ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_GELU_AUX)), kOk);
    ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(C)), kOk);
    ASSERT_EQ(plan.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t(g.m + 1)), kOk);
    EXPECT_EQ(matmul(plan, 1.0f, A, B, 0.0f, C, D, nullptr, 0), CUBLAS_STATUS_INVALID_VALUE)
        << "aux ld not a multiple of 8";
  }
  {
    Plan fp32(g);
    const cublasLtMatmulAlgo_t algo32 = algo_for(fp32);
    Plan other(g, CUDA_R_64F, CUBLAS_COMPUTE_64F, CUDA_R_64F);
    EXPECT_EQ(matmul(other, 1.0, A, B, 0.0, C, D, &algo32), CUBLAS_STATUS_NOT_SUPPORTED) << "an fp32 algo for fp64";
  }
  {
    Plan transc(g);
    ASSERT_EQ(transc.set(CUBLASLT_MATMUL_DESC_TRANSC, int32_t(CUBLAS_OP_T)), kOk);
    EXPECT_EQ(matmul(transc, 1.0f, A, B, 0.0f, C, D, nullptr, 0), CUBLAS_STATUS_NOT_SUPPORTED);
  }
}

TEST(LtStatus, NamesAndStrings) {
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");
  EXPECT_STREQ(cublasGetStatusName(cublasStatus_t(12345)), "CUBLAS_STATUS_UNKNOWN");
  EXPECT_STRNE(cublasGetStatusString(CUBLAS_STATUS_EXECUTION_FAILED), cublasGetStatusString(CUBLAS_STATUS_SUCCESS));
  EXPECT_EQ(int(CUBLAS_STATUS_NOT_SUPPORTED), 15);
  EXPECT_EQ(int(CUBLASLT_EPILOGUE_GELU_AUX_BIAS), 164);
  EXPECT_EQ(int(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE), 26);
}

// ---- streams ----

using gpusim_test::wait_for_flag;

TEST_F(Lt, TheGemmRunsInStreamOrder) {
  Case g;
  Operands<float> h(g);
  Plan plan(g);
  const cublasLtMatmulAlgo_t algo = algo_for(plan);
  float* pinned_a = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned_a, g.size_a() * sizeof(float)), cudaSuccess);
  std::memcpy(pinned_a, h.A.data(), g.size_a() * sizeof(float));
  auto* A = static_cast<float*>(device_bytes(g.size_a() * sizeof(float)));
  float* D = to_device(h.D);
  std::atomic<bool> go{false};
  ASSERT_EQ(cudaLaunchHostFunc(stream, wait_for_flag, &go), cudaSuccess);  // holds the stream
  ASSERT_EQ(cudaMemcpyAsync(A, pinned_a, g.size_a() * sizeof(float), cudaMemcpyHostToDevice, stream), cudaSuccess);
  ASSERT_EQ(matmul(plan, 1.0f, A, to_device(h.B), 0.0f, nullptr, D, &algo), kOk);
  EXPECT_EQ(cudaStreamQuery(stream), cudaErrorNotReady) << "cublasLtMatmul queues, it does not run at once";
  go = true;
  expect_d(g, h, to_host(D, g.size_d()), 1.0, 0.0);
  EXPECT_EQ(cudaFreeHost(pinned_a), cudaSuccess);
}

TEST_F(Lt, ConcurrentStreamsComputeIndependently) {
  Case g;
  g.m = 33;
  g.n = 29;
  g.k = 31;
  Operands<float> h(g);
  Plan plan(g);
  const cublasLtMatmulAlgo_t algo = algo_for(plan);
  cudaStream_t other = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  void* other_workspace = device_bytes(kWorkspaceBytes);
  const float* A = to_device(h.A);
  const float* B = to_device(h.B);
  const float* C = to_device(h.C);
  std::vector<float*> outs;
  for (int i = 0; i < 8; ++i) {
    outs.push_back(to_device(h.D));
    const float alpha = 1.0f, beta = float(i);
    ASSERT_EQ(cublasLtMatmul(handle, plan.desc, &alpha, A, plan.a, B, plan.b, &beta, C, plan.c, outs.back(), plan.d,
                             &algo, i % 2 ? other_workspace : workspace, kWorkspaceBytes, i % 2 ? other : stream),
              kOk);
  }
  ASSERT_EQ(cudaStreamSynchronize(other), cudaSuccess);
  for (int i = 0; i < 8; ++i) expect_d(g, h, to_host(outs[size_t(i)], g.size_d()), 1.0, double(i));
  EXPECT_EQ(cudaStreamDestroy(other), cudaSuccess);
}

// ---- faults ----

TEST_F(LtFault, APageableHostOperandIsAnIllegalAddress) {
  use_device(7);
  Case g;
  Operands<float> h(g);
  Plan plan(g);
  plan.prefer_alignment(4);
  const cublasLtMatmulAlgo_t algo = algo_for(plan);
  float* D = to_device(h.D);
  ASSERT_EQ(matmul(plan, 1.0f, to_device(h.A), h.B.data(), 0.0f, nullptr, D, &algo), kOk)
      << "the host cannot tell; the GPU faults when it reads B";
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
  std::vector<float> after(g.size_d());
  EXPECT_EQ(cudaMemcpy(after.data(), D, after.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaErrorIllegalAddress)
      << "the fault is sticky";
  expected_sync = cudaErrorIllegalAddress;
}

TEST_F(LtFault, AnOperandPastItsAllocationIsAnIllegalAddress) {
  use_device(6);
  Case g;
  Operands<float> h(g);
  Plan plan(g);
  const cublasLtMatmulAlgo_t algo = algo_for(plan);
  // C's allocation is one element short of what its layout spans: ldc * (n - 1) + m.
  auto* C = static_cast<float*>(device_bytes(size_t(g.ldc() * (g.n - 1) + g.m - 1) * sizeof(float)));
  float* D = to_device(h.D);
  ASSERT_EQ(matmul(plan, 1.0f, to_device(h.A), to_device(h.B), 1.0f, C, D, &algo), kOk);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaErrorIllegalAddress);
  expected_sync = cudaErrorIllegalAddress;
}

}  // namespace
