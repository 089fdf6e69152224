#pragma once
// gpu-sim's cuBLASLt, shared by its parts: the descriptor objects (cublaslt_objects.cpp), the problem
// a descriptor and four layouts describe, validated as cuBLASLt validates it (cublaslt_problem.cpp),
// the heuristic and the host side of cublasLtMatmul (cublaslt_matmul.cpp), and the GEMM that runs on
// the stream's worker (cublaslt_compute.cpp).
#include <cublasLt.h>

#include <cstdint>
#include <string>

struct cublasLtContext {
  int device = 0;
};

struct cublasLtMatrixLayoutOpaque_st {
  uint32_t type = CUDA_R_32F;
  int32_t order = CUBLASLT_ORDER_COL;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch_count = 1;
  int64_t batch_stride = 0;
};

struct cublasLtMatmulDescOpaque_st {
  int32_t compute_type = CUBLAS_COMPUTE_32F;
  int32_t scale_type = CUDA_R_32F;
  int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N, transc = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  int64_t bias_batch_stride = 0;
  void* aux = nullptr;
  int64_t aux_ld = 0, aux_batch_stride = 0;
  int32_t sm_count_target = 0;
  int32_t aux_type = -1, bias_type = -1;  // -1: D's type
};

struct cublasLtMatmulPreferenceOpaque_st {
  uint32_t search_mode = CUBLASLT_SEARCH_BEST_FIT;
  uint64_t max_workspace = 0;
  uint32_t reduction_mask = 0x7;
  uint32_t min_alignment[4] = {256, 256, 256, 256};  // A, B, C, D
};

namespace gpusim::lt {

// Prints "gpu-sim cuBLASLt: <call>: <why> (<status name>)" to stderr and returns status.
cublasStatus_t fail(cublasStatus_t status, const char* call, const std::string& why);

// "0x7f..." for messages.
std::string address(const void* p);

// Whether a handle or descriptor was created and not yet destroyed.
bool live(const void* object);

std::string compute_type_name(int32_t type);
std::string data_type_name(int32_t type);
std::string epilogue_name(uint32_t epilogue);

enum class Scalar { F32, F64 };

// What a fast compute type does to A and B before the fp32 GEMM (CUBLAS_COMPUTE_32F_FAST_16BF: bf16,
// CUBLAS_COMPUTE_32F_FAST_TF32: TF32); C, the bias and the accumulation stay fp32.
enum class InputRounding { None, BF16, TF32 };

// alpha or beta as the scalar type says: float or double.
double scalar_value(const void* p, Scalar s);

// One operand as its layout describes it.
struct Matrix {
  int64_t rows = 0, cols = 0, ld = 0, batch_stride = 0;
  // Elements from the first to one past the last that the batch touches (0 when empty).
  int64_t extent(int batch) const;
};

// Epilogue flags (cublasLtEpilogue_t's bits, decoded).
struct Epilogue {
  bool bias = false;  // add bias[row]
  bool relu = false;
  bool gelu = false;
  bool aux = false;      // store the activation's input in the aux matrix
  bool bgrad_a = false;  // bias[row] = sum over k of op(A)
  bool bgrad_b = false;  // bias[col] = sum over k of op(B)
  bool reads_bias_pointer() const { return bias || bgrad_a || bgrad_b; }
};

// D[m x n] = epilogue(alpha * op(A)[m x k] * op(B)[k x n] + beta * C[m x n]), batch times.
struct Problem {
  Scalar scalar = Scalar::F32;
  size_t element_bytes = 4;      // of C, D, the bias and aux: 2 when they are bfloat16 (rounded from fp32)
  size_t ab_element_bytes = 4;   // of A and B: 2 when they are bfloat16 (CUDA_R_16BF, widened to fp32)
  InputRounding rounding = InputRounding::None;
  bool transa = false, transb = false;
  int64_t m = 0, n = 0, k = 0;
  int batch = 1;
  Matrix a, b, c, d;
  Epilogue epilogue;
  bool device_scalars = false;  // alpha and beta are device pointers, read when the GEMM runs
  const void* bias = nullptr;   // from the descriptor: read-only for BIAS, written for BGRAD*
  int64_t bias_length = 0, bias_batch_stride = 0;
  void* aux = nullptr;
  Matrix aux_matrix;
};

// Validates the descriptor and layouts as cublasLtMatmulAlgoGetHeuristic and cublasLtMatmul do and
// describes the problem: CUBLAS_STATUS_INVALID_VALUE for what cuBLASLt rejects (dimensions that do
// not fit the operations, ld < rows, ...), CUBLAS_STATUS_NOT_SUPPORTED for what gpu-sim does not
// simulate. Prints the reason; `call` names the API call in it.
cublasStatus_t resolve(const char* call, const cublasLtMatmulDescOpaque_st& desc,
                       const cublasLtMatrixLayoutOpaque_st& a, const cublasLtMatrixLayoutOpaque_st& b,
                       const cublasLtMatrixLayoutOpaque_st& c, const cublasLtMatrixLayoutOpaque_st& d, Problem& out);

// A queued GEMM: the problem, its operands, and alpha/beta (host mode: the values read at call time;
// device mode: the pointers).
struct Job {
  Problem p;
  const void* A = nullptr;
  const void* B = nullptr;
  const void* C = nullptr;
  void* D = nullptr;
  double alpha = 0, beta = 0;
  const void* alpha_ptr = nullptr;
  const void* beta_ptr = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;  // what the algorithm uses of it
};

// Runs on the stream's worker: checks that every operand is device-accessible (else a device fault),
// fills the workspace, computes.
void run(const Job& job);

}  // namespace gpusim::lt
