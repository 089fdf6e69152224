// gpu-sim's cuBLASLt: what a matmul descriptor and four layouts describe, validated as cuBLASLt
// validates it. CUBLAS_STATUS_INVALID_VALUE for what cuBLASLt rejects; CUBLAS_STATUS_NOT_SUPPORTED for
// what it would run but gpu-sim does not simulate (each with one line on stderr saying which).
#include <climits>
#include <string>

#include "cublaslt_internal.hpp"

namespace gpusim::lt {

std::string compute_type_name(int32_t type) {
  switch (type) {
    case CUBLAS_COMPUTE_16F:
      return "CUBLAS_COMPUTE_16F";
    case CUBLAS_COMPUTE_16F_PEDANTIC:
      return "CUBLAS_COMPUTE_16F_PEDANTIC";
    case CUBLAS_COMPUTE_32F:
      return "CUBLAS_COMPUTE_32F";
    case CUBLAS_COMPUTE_32F_PEDANTIC:
      return "CUBLAS_COMPUTE_32F_PEDANTIC";
    case CUBLAS_COMPUTE_64F:
      return "CUBLAS_COMPUTE_64F";
    case CUBLAS_COMPUTE_64F_PEDANTIC:
      return "CUBLAS_COMPUTE_64F_PEDANTIC";
    case CUBLAS_COMPUTE_32I:
      return "CUBLAS_COMPUTE_32I";
    case CUBLAS_COMPUTE_32I_PEDANTIC:
      return "CUBLAS_COMPUTE_32I_PEDANTIC";
    case CUBLAS_COMPUTE_32F_FAST_16F:
      return "CUBLAS_COMPUTE_32F_FAST_16F";
    case CUBLAS_COMPUTE_32F_FAST_16BF:
      return "CUBLAS_COMPUTE_32F_FAST_16BF";
    case CUBLAS_COMPUTE_32F_FAST_TF32:
      return "CUBLAS_COMPUTE_32F_FAST_TF32";
  }
  return "compute type " + std::to_string(type);
}

std::string data_type_name(int32_t type) {
  switch (type) {
    case CUDA_R_32F:
      return "CUDA_R_32F";
    case CUDA_R_64F:
      return "CUDA_R_64F";
    case CUDA_R_16F:
      return "CUDA_R_16F";
    case CUDA_R_16BF:
      return "CUDA_R_16BF";
    case CUDA_R_8I:
      return "CUDA_R_8I";
    case CUDA_R_32I:
      return "CUDA_R_32I";
    case CUDA_R_8F_E4M3:
      return "CUDA_R_8F_E4M3";
    case CUDA_R_8F_E5M2:
      return "CUDA_R_8F_E5M2";
  }
  return "data type " + std::to_string(type);
}

std::string epilogue_name(uint32_t epilogue) {
  switch (epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT:
      return "CUBLASLT_EPILOGUE_DEFAULT";
    case CUBLASLT_EPILOGUE_RELU:
      return "CUBLASLT_EPILOGUE_RELU";
    case CUBLASLT_EPILOGUE_RELU_AUX:
      return "CUBLASLT_EPILOGUE_RELU_AUX";
    case CUBLASLT_EPILOGUE_BIAS:
      return "CUBLASLT_EPILOGUE_BIAS";
    case CUBLASLT_EPILOGUE_RELU_BIAS:
      return "CUBLASLT_EPILOGUE_RELU_BIAS";
    case CUBLASLT_EPILOGUE_RELU_AUX_BIAS:
      return "CUBLASLT_EPILOGUE_RELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DRELU:
      return "CUBLASLT_EPILOGUE_DRELU";
    case CUBLASLT_EPILOGUE_DRELU_BGRAD:
      return "CUBLASLT_EPILOGUE_DRELU_BGRAD";
    case CUBLASLT_EPILOGUE_GELU:
      return "CUBLASLT_EPILOGUE_GELU";
    case CUBLASLT_EPILOGUE_GELU_AUX:
      return "CUBLASLT_EPILOGUE_GELU_AUX";
    case CUBLASLT_EPILOGUE_GELU_BIAS:
      return "CUBLASLT_EPILOGUE_GELU_BIAS";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
      return "CUBLASLT_EPILOGUE_GELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DGELU:
      return "CUBLASLT_EPILOGUE_DGELU";
    case CUBLASLT_EPILOGUE_DGELU_BGRAD:
      return "CUBLASLT_EPILOGUE_DGELU_BGRAD";
    case CUBLASLT_EPILOGUE_BGRADA:
      return "CUBLASLT_EPILOGUE_BGRADA";
    case CUBLASLT_EPILOGUE_BGRADB:
      return "CUBLASLT_EPILOGUE_BGRADB";
  }
  return "epilogue " + std::to_string(epilogue);
}

int64_t Matrix::extent(int batch) const {
  if (rows == 0 || cols == 0 || batch == 0) return 0;
  return int64_t(batch - 1) * batch_stride + (cols - 1) * ld + rows;
}

namespace {

using Layout = cublasLtMatrixLayoutOpaque_st;
using Desc = cublasLtMatmulDescOpaque_st;
constexpr cublasStatus_t kOk = CUBLAS_STATUS_SUCCESS;
constexpr cublasStatus_t kInvalid = CUBLAS_STATUS_INVALID_VALUE;
constexpr cublasStatus_t kUnsupported = CUBLAS_STATUS_NOT_SUPPORTED;

std::string shape(int64_t rows, int64_t cols) { return std::to_string(rows) + " x " + std::to_string(cols); }

cublasStatus_t matrix_of(const char* call, const std::string& name, const Layout& l, Matrix& out) {
  if (l.rows > uint64_t(INT64_MAX) || l.cols > uint64_t(INT64_MAX) || l.ld < 0)
    return fail(kInvalid, call, name + ": negative rows, columns or leading dimension");
  if (l.ld < int64_t(l.rows))
    return fail(kInvalid, call,
                name + ": leading dimension " + std::to_string(l.ld) + " < rows " + std::to_string(l.rows));
  if (l.batch_count < 1 || l.batch_stride < 0)
    return fail(kInvalid, call, name + ": batch count < 1 or negative batch stride");
  // OpenBLAS's cblas takes int dimensions.
  if (l.rows > uint64_t(INT_MAX) || l.cols > uint64_t(INT_MAX) || l.ld > INT_MAX)
    return fail(kUnsupported, call, name + ": dimensions beyond 2^31 - 1");
  out = Matrix{int64_t(l.rows), int64_t(l.cols), l.ld, l.batch_stride};
  return kOk;
}

bool is_compute_32f(int32_t t) { return t == CUBLAS_COMPUTE_32F || t == CUBLAS_COMPUTE_32F_PEDANTIC; }
bool is_compute_64f(int32_t t) { return t == CUBLAS_COMPUTE_64F || t == CUBLAS_COMPUTE_64F_PEDANTIC; }

// The fp32 compute types: exact, or a fast one that rounds A and B first.
bool fp32_compute(int32_t t, InputRounding& rounding) {
  rounding = t == CUBLAS_COMPUTE_32F_FAST_16BF   ? InputRounding::BF16
             : t == CUBLAS_COMPUTE_32F_FAST_TF32 ? InputRounding::TF32
                                                 : InputRounding::None;
  return is_compute_32f(t) || rounding != InputRounding::None;
}

// fp32 (sgemm, A and B rounded first for the fast compute types) and fp64 (dgemm), every operand and
// the scale of the one type.
cublasStatus_t scalar_of(const char* call, const Desc& desc, const Layout* const layouts[4], Problem& p) {
  const uint32_t type = layouts[0]->type;
  bool same = true;
  for (int i = 1; i < 4; ++i) same = same && layouts[i]->type == type;
  InputRounding rounding = InputRounding::None;
  if (same && fp32_compute(desc.compute_type, rounding) && desc.scale_type == CUDA_R_32F && type == CUDA_R_32F) {
    p.scalar = Scalar::F32;
    p.element_bytes = sizeof(float);
    p.rounding = rounding;
    return kOk;
  }
  // bfloat16 A and B, fp32 C and D: each bf16 value is exact in fp32, so this is the fp32 GEMM of
  // the widened operands (tensor cores multiply them exactly and accumulate in fp32).
  if (layouts[0]->type == CUDA_R_16BF && layouts[1]->type == CUDA_R_16BF && layouts[2]->type == CUDA_R_32F &&
      layouts[3]->type == CUDA_R_32F && is_compute_32f(desc.compute_type) && desc.scale_type == CUDA_R_32F) {
    p.scalar = Scalar::F32;
    p.element_bytes = sizeof(float);
    p.ab_element_bytes = 2;
    return kOk;
  }
  // bfloat16 A, B, C and D (what llm.c and PyTorch's autocast run): the same fp32 GEMM, its result
  // rounded to bfloat16 once, as the epilogue stores it; the bias and aux of D's type.
  if (same && type == CUDA_R_16BF && is_compute_32f(desc.compute_type) && desc.scale_type == CUDA_R_32F) {
    p.scalar = Scalar::F32;
    p.element_bytes = p.ab_element_bytes = 2;
    return kOk;
  }
  if (same && is_compute_64f(desc.compute_type) && desc.scale_type == CUDA_R_64F && type == CUDA_R_64F) {
    p.scalar = Scalar::F64;
    p.element_bytes = p.ab_element_bytes = sizeof(double);
    return kOk;
  }
  return fail(kUnsupported, call,
              compute_type_name(desc.compute_type) + " with scale type " + data_type_name(desc.scale_type) +
                  " and A/B/C/D types " + data_type_name(int32_t(layouts[0]->type)) + "/" +
                  data_type_name(int32_t(layouts[1]->type)) + "/" + data_type_name(int32_t(layouts[2]->type)) + "/" +
                  data_type_name(int32_t(layouts[3]->type)) +
                  " is not simulated (gpu-sim runs CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_16BF and "
                  "CUBLAS_COMPUTE_32F_FAST_TF32 on CUDA_R_32F with scale type CUDA_R_32F, CUBLAS_COMPUTE_32F on "
                  "CUDA_R_16BF A and B with CUDA_R_32F or CUDA_R_16BF C and D, and CUBLAS_COMPUTE_64F on CUDA_R_64F "
                  "with scale type CUDA_R_64F)");
}

// For real data CUBLAS_OP_C is CUBLAS_OP_T.
cublasStatus_t op_of(const char* call, const char* name, int32_t op, bool& trans) {
  if (op != CUBLAS_OP_N && op != CUBLAS_OP_T && op != CUBLAS_OP_C)
    return fail(kInvalid, call, std::string(name) + ": operation " + std::to_string(op));
  trans = op != CUBLAS_OP_N;
  return kOk;
}

cublasStatus_t epilogue_of(const char* call, uint32_t value, Epilogue& e) {
  switch (value) {
    case CUBLASLT_EPILOGUE_DEFAULT:
      return kOk;
    case CUBLASLT_EPILOGUE_RELU:
      e.relu = true;
      return kOk;
    case CUBLASLT_EPILOGUE_BIAS:
      e.bias = true;
      return kOk;
    case CUBLASLT_EPILOGUE_RELU_BIAS:
      e.relu = e.bias = true;
      return kOk;
    case CUBLASLT_EPILOGUE_GELU:
      e.gelu = true;
      return kOk;
    case CUBLASLT_EPILOGUE_GELU_BIAS:
      e.gelu = e.bias = true;
      return kOk;
    case CUBLASLT_EPILOGUE_GELU_AUX:
      e.gelu = e.aux = true;
      return kOk;
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
      e.gelu = e.aux = e.bias = true;
      return kOk;
    case CUBLASLT_EPILOGUE_BGRADA:
      e.bgrad_a = true;
      return kOk;
    case CUBLASLT_EPILOGUE_BGRADB:
      e.bgrad_b = true;
      return kOk;
    case CUBLASLT_EPILOGUE_RELU_AUX:
    case CUBLASLT_EPILOGUE_RELU_AUX_BIAS:
    case CUBLASLT_EPILOGUE_DRELU:
    case CUBLASLT_EPILOGUE_DRELU_BGRAD:
    case CUBLASLT_EPILOGUE_DGELU:
    case CUBLASLT_EPILOGUE_DGELU_BGRAD:
      return fail(kUnsupported, call, epilogue_name(value) + " is not simulated");
  }
  return fail(kInvalid, call, "unknown epilogue " + std::to_string(value));
}

// m, n, k from D and op(A); op(A) must be m x k, op(B) k x n, C m x n, all with one batch count.
cublasStatus_t fit_shapes(const char* call, const Layout* const layouts[4], Problem& p) {
  p.m = p.d.rows;
  p.n = p.d.cols;
  const int64_t a_rows = p.transa ? p.a.cols : p.a.rows;
  p.k = p.transa ? p.a.rows : p.a.cols;
  const int64_t b_rows = p.transb ? p.b.cols : p.b.rows, b_cols = p.transb ? p.b.rows : p.b.cols;
  if (a_rows != p.m || b_rows != p.k || b_cols != p.n || p.c.rows != p.m || p.c.cols != p.n)
    return fail(kInvalid, call,
                "op(A) " + shape(a_rows, p.k) + ", op(B) " + shape(b_rows, b_cols) + ", C " +
                    shape(p.c.rows, p.c.cols) + " do not fit D " + shape(p.m, p.n));
  p.batch = layouts[3]->batch_count;
  for (int i = 0; i < 3; ++i)
    if (layouts[i]->batch_count != p.batch) return fail(kInvalid, call, "the layouts' batch counts differ");
  return kOk;
}

// An epilogue vector or matrix must have D's type (the default, -1, means D's type).
bool of_d_type(int32_t type, const Layout& d) { return type == -1 || type == int32_t(d.type); }

cublasStatus_t epilogue_operands(const char* call, const Desc& desc, const Layout& d, Problem& p) {
  const Epilogue& e = p.epilogue;
  if (e.reads_bias_pointer()) {
    if (!of_d_type(desc.bias_type, d))
      return fail(kUnsupported, call,
                  "bias type " + data_type_name(desc.bias_type) + " with D of type " + data_type_name(int32_t(d.type)) +
                      " is not simulated");
    if (desc.bias_batch_stride < 0) return fail(kInvalid, call, "negative bias batch stride");
    p.bias = desc.bias;
    p.bias_length = e.bgrad_b ? p.n : p.m;
    p.bias_batch_stride = desc.bias_batch_stride;
  }
  if (e.aux) {
    if (!of_d_type(desc.aux_type, d))
      return fail(kUnsupported, call,
                  "aux type " + data_type_name(desc.aux_type) + " with D of type " + data_type_name(int32_t(d.type)) +
                      " is not simulated");
    if (desc.aux_ld < p.m || desc.aux_ld % 8 != 0 || desc.aux_batch_stride < 0 || desc.aux_batch_stride % 8 != 0)
      return fail(kInvalid, call,
                  "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD " + std::to_string(desc.aux_ld) +
                      " must be a multiple of 8 and at least the rows of D, " + std::to_string(p.m) +
                      ", and the aux batch stride a non-negative multiple of 8");
    p.aux = desc.aux;
    p.aux_matrix = Matrix{p.m, p.n, desc.aux_ld, desc.aux_batch_stride};
  }
  return kOk;
}

cublasStatus_t modes(const char* call, const Desc& desc, Problem& p) {
  if (desc.pointer_mode != CUBLASLT_POINTER_MODE_HOST && desc.pointer_mode != CUBLASLT_POINTER_MODE_DEVICE)
    return fail(kUnsupported, call, "pointer mode " + std::to_string(desc.pointer_mode) + " is not simulated");
  p.device_scalars = desc.pointer_mode == CUBLASLT_POINTER_MODE_DEVICE;
  if (desc.transc != CUBLAS_OP_N) return fail(kUnsupported, call, "CUBLASLT_MATMUL_DESC_TRANSC other than CUBLAS_OP_N");
  if (cublasStatus_t s = op_of(call, "CUBLASLT_MATMUL_DESC_TRANSA", desc.transa, p.transa); s != kOk) return s;
  return op_of(call, "CUBLASLT_MATMUL_DESC_TRANSB", desc.transb, p.transb);
}

}  // namespace

cublasStatus_t resolve(const char* call, const Desc& desc, const Layout& a, const Layout& b, const Layout& c,
                       const Layout& d, Problem& p) {
  const Layout* const layouts[4] = {&a, &b, &c, &d};
  Matrix* const matrices[4] = {&p.a, &p.b, &p.c, &p.d};
  static const char* const names[4] = {"A", "B", "C", "D"};
  cublasStatus_t s = scalar_of(call, desc, layouts, p);
  if (s == kOk) s = modes(call, desc, p);
  for (int i = 0; i < 4 && s == kOk; ++i) s = matrix_of(call, names[i], *layouts[i], *matrices[i]);
  if (s == kOk) s = fit_shapes(call, layouts, p);
  if (s == kOk) s = epilogue_of(call, desc.epilogue, p.epilogue);
  if (s == kOk) s = epilogue_operands(call, desc, d, p);
  return s;
}

}  // namespace gpusim::lt
