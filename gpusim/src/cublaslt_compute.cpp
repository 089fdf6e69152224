// gpu-sim's cuBLASLt: the GEMM that cublasLtMatmul queued, run on the stream's worker thread.
//
// First, as a GPU would, it faults (cudaErrorIllegalAddress, the device's sticky error) on any operand
// the device cannot reach: every range it reads or writes must lie in cudaMalloc'd or page-locked host
// memory. Then it fills the workspace it uses with a pattern (a workspace released too early and
// reused is overwritten, as on a GPU), and computes with OpenBLAS: column-major sgemm (exact fp32) or
// dgemm, then the epilogue. The fast compute types (CUBLAS_COMPUTE_32F_FAST_16BF, _FAST_TF32) first
// copy A and B into host scratch rounded as the tensor cores would see them, then run the same sgemm
// and epilogue on the copies: products of such operands are exact in fp32, and C, the bias and the
// accumulation stay fp32, as on the GPU. bf16 A and B are widened into such copies; with bf16 C and D
// too, D (and the epilogue's aux) are rounded to bf16 once, as they are stored. Results match cuBLAS's
// only to rounding: both sum the k products in a blocking order of their own.
#include <cblas.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <gpusim/runtime.hpp>
#include <string>
#include <vector>

#include "cublaslt_internal.hpp"

namespace gpusim::lt {

double scalar_value(const void* p, Scalar s) {
  if (s == Scalar::F64) return *static_cast<const double*>(p);
  return *static_cast<const float*>(p);
}

namespace {

constexpr unsigned char kWorkspacePattern = 0x5a;

CBLAS_TRANSPOSE op(bool trans) { return trans ? CblasTrans : CblasNoTrans; }

// cblas wants ld >= 1 even where nothing is read (k == 0).
int ld_of(const Matrix& m) { return int(std::max<int64_t>(m.ld, 1)); }

void gemm(const Problem& p, float alpha, const float* A, const float* B, float beta, float* D) {
  cblas_sgemm(CblasColMajor, op(p.transa), op(p.transb), int(p.m), int(p.n), int(p.k), alpha, A, ld_of(p.a), B,
              ld_of(p.b), beta, D, ld_of(p.d));
}

void gemm(const Problem& p, double alpha, const double* A, const double* B, double beta, double* D) {
  cblas_dgemm(CblasColMajor, op(p.transa), op(p.transb), int(p.m), int(p.n), int(p.k), alpha, A, ld_of(p.a), B,
              ld_of(p.b), beta, D, ld_of(p.d));
}

bool accessible(const char* name, const void* p, int64_t bytes) {
  if (bytes <= 0 || device_accessible(p, size_t(bytes))) return true;
  device_fault(cudaErrorIllegalAddress, std::string(name) + " [" + address(p) + ", +" + std::to_string(bytes) +
                                            " bytes) is not device memory or page-locked host memory");
  return false;
}

int64_t bias_extent(const Problem& p) {
  if (p.bias_length == 0) return 0;
  return int64_t(p.batch - 1) * p.bias_batch_stride + p.bias_length;
}

bool operands_accessible(const Job& job, bool reads_c) {
  const Problem& p = job.p;
  const auto e = int64_t(p.element_bytes);
  const auto ab = int64_t(p.ab_element_bytes);
  return accessible("A", job.A, p.a.extent(p.batch) * ab) && accessible("B", job.B, p.b.extent(p.batch) * ab) &&
         (!reads_c || accessible("C", job.C, p.c.extent(p.batch) * e)) &&
         accessible("D", job.D, p.d.extent(p.batch) * e) &&
         (!p.epilogue.reads_bias_pointer() || accessible("bias", p.bias, bias_extent(p) * e)) &&
         (!p.epilogue.aux || accessible("epilogue aux", p.aux, p.aux_matrix.extent(p.batch) * e)) &&
         accessible("workspace", job.workspace, int64_t(job.workspace_bytes));
}

// One batch entry's operands.
template <class T>
struct Operands {
  const T* A;
  const T* B;
  const T* C;  // null when beta is zero and C was not given
  T* D;
  T* bias;  // read (BIAS) or written (BGRADA/B)
  T* aux;
};

// cuBLASLt's GELU: the tanh approximation.
template <class T>
T gelu(T x) {
  const T c = T(0.7978845608028654);  // sqrt(2 / pi)
  return T(0.5) * x * (T(1) + std::tanh(c * (x + T(0.044715) * x * x * x)));
}

// BGRADA: bias[i] = sum over k of op(A)[i, k]; BGRADB: bias[j] = sum over k of op(B)[k, j].
template <class T>
void bias_gradient(const Problem& p, const Operands<T>& o) {
  for (int64_t r = 0; r < p.bias_length; ++r) {
    double sum = 0;
    for (int64_t kk = 0; kk < p.k; ++kk) {
      if (p.epilogue.bgrad_a)
        sum += p.transa ? o.A[kk + r * p.a.ld] : o.A[r + kk * p.a.ld];
      else
        sum += p.transb ? o.B[r + kk * p.b.ld] : o.B[kk + r * p.b.ld];
    }
    o.bias[r] = T(sum);
  }
}

// D = act(D + bias), the activation's input kept in aux.
template <class T>
void pointwise_epilogue(const Problem& p, const Operands<T>& o) {
  const Epilogue& e = p.epilogue;
  if (!e.bias && !e.relu && !e.gelu) return;
  for (int64_t j = 0; j < p.n; ++j) {
    for (int64_t i = 0; i < p.m; ++i) {
      T& d = o.D[i + j * p.d.ld];
      T x = e.bias ? d + o.bias[i] : d;
      if (e.aux) o.aux[i + j * p.aux_matrix.ld] = x;
      if (e.relu) x = std::fmax(x, T(0));
      if (e.gelu) x = gelu(x);
      d = x;
    }
  }
}

template <class T>
void compute_one(const Problem& p, const Operands<T>& o, T alpha, T beta) {
  if (p.epilogue.bgrad_a || p.epilogue.bgrad_b) bias_gradient(p, o);
  if (p.m == 0 || p.n == 0) return;
  if (beta != T(0) && o.C != o.D) {  // out of place: D = C first, then the GEMM accumulates into D
    for (int64_t j = 0; j < p.n; ++j) std::copy(o.C + j * p.c.ld, o.C + j * p.c.ld + p.m, o.D + j * p.d.ld);
  }
  gemm(p, alpha, o.A, o.B, beta, o.D);  // beta == 0: D is written, not read
  pointwise_epilogue(p, o);
}

// base + offset elements; null stays null (an operand that is never touched).
template <class T>
T* at(const void* base, int64_t offset) {
  return base ? static_cast<T*>(const_cast<void*>(base)) + offset : nullptr;
}

// Batch entry b's operands.
template <class T>
Operands<T> operands_of(const Job& job, int64_t b) {
  const Problem& p = job.p;
  // The descriptor holds the bias as const void*; the gradient epilogues write through it.
  return Operands<T>{at<const T>(job.A, b * p.a.batch_stride), at<const T>(job.B, b * p.b.batch_stride),
                     at<const T>(job.C, b * p.c.batch_stride), at<T>(job.D, b * p.d.batch_stride),
                     at<T>(p.bias, b * p.bias_batch_stride),   at<T>(p.aux, b * p.aux_matrix.batch_stride)};
}

template <class T>
void compute(const Job& job, T alpha, T beta) {
  for (int64_t b = 0; b < job.p.batch; ++b) compute_one(job.p, operands_of<T>(job, b), alpha, beta);
}

// x as the fast compute types hand it to the tensor cores: rounded to bf16 (8 significant bits: the
// top 16 bits of the fp32 pattern) or TF32 (11 significant bits: the top 19), to nearest, ties to
// even, and returned as the fp32 value of that pattern (low bits zero). Integer rounding of the
// pattern is right for denormals too (bf16 and TF32 share fp32's exponent range) and carries a finite
// value past the largest finite one into Inf, as RNE conversion does; Inf stays Inf. A NaN is quieted
// instead (its payload could round into Inf, or wrap a 0x7fffxxxx pattern to -0).
float round_input(float x, InputRounding rounding) {
  if (rounding == InputRounding::None) return x;  // CUBLAS_COMPUTE_32F
  const int dropped = rounding == InputRounding::BF16 ? 16 : 13;
  const uint32_t dropped_mask = (uint32_t(1) << dropped) - 1;
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    bits = (bits | 0x00400000u) & ~dropped_mask;  // the quiet bit is kept by both formats
  } else {
    const uint32_t kept_lsb = (bits >> dropped) & 1;
    bits = (bits + (dropped_mask >> 1) + kept_lsb) & ~dropped_mask;  // half - 1, plus 1 if odd: ties to even
  }
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// The rows x cols that the GEMM reads of `m` at `src` (stored layout, ld m.ld), rounded, packed into
// `dst` with ld = rows.
void copy_rounded(const Matrix& m, const float* src, InputRounding rounding, std::vector<float>& dst) {
  dst.resize(size_t(m.rows * m.cols));
  for (int64_t j = 0; j < m.cols; ++j)
    for (int64_t i = 0; i < m.rows; ++i) dst[size_t(i + j * m.rows)] = round_input(src[i + j * m.ld], rounding);
}

// Each batch entry's A and B packed into scratch (ld = rows) by pack(matrix, base, offset, scratch),
// then the fp32 path on the copies. The transposes stay: the copies keep A's and B's stored layouts.
template <class Pack>
void compute_on_copies(const Job& job, float alpha, float beta, const Pack& pack) {
  Problem p = job.p;
  p.a.ld = p.a.rows;
  p.b.ld = p.b.rows;
  std::vector<float> a, b;
  for (int64_t batch = 0; batch < p.batch; ++batch) {
    Operands<float> o = operands_of<float>(job, batch);
    pack(job.p.a, job.A, batch * job.p.a.batch_stride, a);
    pack(job.p.b, job.B, batch * job.p.b.batch_stride, b);
    o.A = a.data();
    o.B = b.data();
    compute_one(p, o, alpha, beta);
  }
}

// The rows x cols that the GEMM reads of the bfloat16 matrix `m` at `src`, widened to fp32 (the
// bf16 pattern is the top half of the fp32 one) and packed into `dst` with ld = rows.
void copy_widened(const Matrix& m, const uint16_t* src, std::vector<float>& dst) {
  dst.resize(size_t(m.rows * m.cols));
  for (int64_t j = 0; j < m.cols; ++j)
    for (int64_t i = 0; i < m.rows; ++i) {
      const uint32_t bits = uint32_t(src[i + j * m.ld]) << 16;
      std::memcpy(&dst[size_t(i + j * m.rows)], &bits, sizeof bits);
    }
}

// The fast compute types: A and B rounded into the copies (the bias gradient epilogues, too, sum the
// rounded operands: cuBLASLt does not document which it sums).
void compute_rounded(const Job& job, float alpha, float beta) {
  compute_on_copies(job, alpha, beta, [&](const Matrix& m, const void* base, int64_t offset, std::vector<float>& dst) {
    copy_rounded(m, static_cast<const float*>(base) + offset, job.p.rounding, dst);
  });
}

// bfloat16 A and B: widened into the copies.
void compute_widened(const Job& job, float alpha, float beta) {
  compute_on_copies(job, alpha, beta, [](const Matrix& m, const void* base, int64_t offset, std::vector<float>& dst) {
    copy_widened(m, static_cast<const uint16_t*>(base) + offset, dst);
  });
}

uint16_t bf16_pattern(float x) {
  const float r = round_input(x, InputRounding::BF16);
  uint32_t bits;
  std::memcpy(&bits, &r, sizeof bits);
  return uint16_t(bits >> 16);
}

// The fp32 values (ld = rows) rounded to bfloat16 into the stored matrix `m` at dst.
void store_rounded(const Matrix& m, const std::vector<float>& src, uint16_t* dst) {
  for (int64_t j = 0; j < m.cols; ++j)
    for (int64_t i = 0; i < m.rows; ++i) dst[i + j * m.ld] = bf16_pattern(src[size_t(i + j * m.rows)]);
}

// bfloat16 A, B, C and D (and the bias and aux, of D's type): each batch entry computed in fp32 on
// host copies, as compute_widened does (C widened into D's copy when beta is not zero, the bias
// widened), then D, aux and a bias gradient rounded to bfloat16 once, to nearest even, where they are
// stored: the GPU's epilogue converts its fp32 accumulators as it writes them.
void compute_bf16_output(const Job& job, float alpha, float beta) {
  Problem p = job.p;
  p.a.ld = p.a.rows;
  p.b.ld = p.b.rows;
  p.c.ld = p.d.ld = p.aux_matrix.ld = p.m;
  const Matrix bias_vector{p.bias_length, 1, p.bias_length, 0};
  const bool bgrad = p.epilogue.bgrad_a || p.epilogue.bgrad_b;
  std::vector<float> a, b, d, bias, aux(p.epilogue.aux ? size_t(p.m * p.n) : 0);
  for (int64_t batch = 0; batch < p.batch; ++batch) {
    const Operands<uint16_t> in = operands_of<uint16_t>(job, batch);
    copy_widened(job.p.a, in.A, a);
    copy_widened(job.p.b, in.B, b);
    if (beta != 0.0f) {
      copy_widened(Matrix{p.m, p.n, job.p.c.ld, 0}, in.C, d);
    } else {
      d.assign(size_t(p.m * p.n), 0.0f);
    }
    bias.assign(size_t(p.bias_length), 0.0f);
    if (p.epilogue.bias) copy_widened(bias_vector, in.bias, bias);
    compute_one(p, Operands<float>{a.data(), b.data(), d.data(), d.data(), bias.data(), aux.data()}, alpha, beta);
    store_rounded(Matrix{p.m, p.n, job.p.d.ld, 0}, d, in.D);
    if (p.epilogue.aux) store_rounded(Matrix{p.m, p.n, job.p.aux_matrix.ld, 0}, aux, in.aux);
    if (bgrad) store_rounded(bias_vector, bias, in.bias);
  }
}

}  // namespace

void run(const Job& job) {
  const Problem& p = job.p;
  double alpha = job.alpha, beta = job.beta;
  if (p.device_scalars) {
    const auto e = int64_t(p.scalar == Scalar::F64 ? sizeof(double) : sizeof(float));  // the scale type's
    if (!accessible("alpha", job.alpha_ptr, e) || !accessible("beta", job.beta_ptr, e)) return;
    alpha = scalar_value(job.alpha_ptr, p.scalar);
    beta = scalar_value(job.beta_ptr, p.scalar);
  }
  if (!operands_accessible(job, beta != 0)) return;
  if (job.workspace_bytes > 0) std::memset(job.workspace, kWorkspacePattern, job.workspace_bytes);
  if (p.scalar == Scalar::F64)
    compute<double>(job, alpha, beta);
  else if (p.element_bytes == 2)
    compute_bf16_output(job, float(alpha), float(beta));
  else if (p.ab_element_bytes == 2)
    compute_widened(job, float(alpha), float(beta));
  else if (p.rounding != InputRounding::None)
    compute_rounded(job, float(alpha), float(beta));
  else
    compute<float>(job, float(alpha), float(beta));
}

}  // namespace gpusim::lt
