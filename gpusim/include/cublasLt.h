#pragma once
// gpu-sim's cublasLt.h: the cuBLASLt matmul API (handle, matmul/layout/preference descriptors, the
// heuristic, cublasLtMatmul) with CUDA 13's names and numeric values, executed on the CPU with OpenBLAS
// (gpusim/src/cublaslt_*.cpp). Written for gpu-sim from the cuBLASLt documentation. Only what is
// simulated is declared: fp32 (CUBLAS_COMPUTE_32F, and CUBLAS_COMPUTE_32F_FAST_16BF / _FAST_TF32, which
// round A and B to bf16 / TF32 first) and fp64 (CUBLAS_COMPUTE_64F) GEMMs on column-major layouts,
// strided batches, and the epilogues DEFAULT, RELU, BIAS, RELU_BIAS, GELU, GELU_BIAS, GELU_AUX,
// GELU_AUX_BIAS, BGRADA and BGRADB. Anything else declared here but not simulated (another data or
// compute type, a gradient epilogue) makes the call return CUBLAS_STATUS_NOT_SUPPORTED and print one
// line to stderr; an attribute or call not declared here fails to compile.
#include <cstddef>
#include <cstdint>

#include "cublas_api.h"
#include "gpusim/driver_types.h"
#include "library_types.h"

// The descriptors are opaque here (the real ones are fixed-size structs that may be placed in the
// caller's memory with the ...Init calls, which gpu-sim does not offer).
typedef struct cublasLtContext* cublasLtHandle_t;
typedef struct cublasLtMatmulDescOpaque_st cublasLtMatmulDescOpaque_t;
typedef cublasLtMatmulDescOpaque_t* cublasLtMatmulDesc_t;
typedef struct cublasLtMatrixLayoutOpaque_st cublasLtMatrixLayoutOpaque_t;
typedef cublasLtMatrixLayoutOpaque_t* cublasLtMatrixLayout_t;
typedef struct cublasLtMatmulPreferenceOpaque_st cublasLtMatmulPreferenceOpaque_t;
typedef cublasLtMatmulPreferenceOpaque_t* cublasLtMatmulPreference_t;

// An algorithm chosen by the heuristic: 64 bytes that may be copied and kept, as the real one.
typedef struct {
  uint64_t data[8];
} cublasLtMatmulAlgo_t;

typedef struct {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;  // bytes of workspace cublasLtMatmul needs with this algorithm
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
} cublasLtMatmulHeuristicResult_t;

typedef enum {
  CUBLASLT_POINTER_MODE_HOST = CUBLAS_POINTER_MODE_HOST,
  CUBLASLT_POINTER_MODE_DEVICE = CUBLAS_POINTER_MODE_DEVICE,
} cublasLtPointerMode_t;

typedef enum {
  CUBLASLT_ORDER_COL = 0,
  CUBLASLT_ORDER_ROW = 1,
} cublasLtOrder_t;

// What the epilogue does to alpha*op(A)*op(B) + beta*C: bits combine (RELU_BIAS = RELU | BIAS);
// 128 marks an auxiliary matrix (GELU_AUX: the GELU input is stored there).
typedef enum {
  CUBLASLT_EPILOGUE_DEFAULT = 1,
  CUBLASLT_EPILOGUE_RELU = 2,
  CUBLASLT_EPILOGUE_RELU_AUX = 2 | 128,
  CUBLASLT_EPILOGUE_BIAS = 4,
  CUBLASLT_EPILOGUE_RELU_BIAS = 2 | 4,
  CUBLASLT_EPILOGUE_RELU_AUX_BIAS = 2 | 128 | 4,
  CUBLASLT_EPILOGUE_DRELU = 8 | 128,
  CUBLASLT_EPILOGUE_DRELU_BGRAD = 8 | 128 | 16,
  CUBLASLT_EPILOGUE_GELU = 32,
  CUBLASLT_EPILOGUE_GELU_AUX = 32 | 128,
  CUBLASLT_EPILOGUE_GELU_BIAS = 32 | 4,
  CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 32 | 128 | 4,
  CUBLASLT_EPILOGUE_DGELU = 64 | 128,
  CUBLASLT_EPILOGUE_DGELU_BGRAD = 64 | 128 | 16,
  CUBLASLT_EPILOGUE_BGRADA = 256,
  CUBLASLT_EPILOGUE_BGRADB = 512,
} cublasLtEpilogue_t;

// Matrix layout attributes; the value types are in brackets.
typedef enum {
  CUBLASLT_MATRIX_LAYOUT_TYPE = 0,                  // [uint32_t] cudaDataType
  CUBLASLT_MATRIX_LAYOUT_ORDER = 1,                 // [int32_t] cublasLtOrder_t; only COL is simulated
  CUBLASLT_MATRIX_LAYOUT_ROWS = 2,                  // [uint64_t]
  CUBLASLT_MATRIX_LAYOUT_COLS = 3,                  // [uint64_t]
  CUBLASLT_MATRIX_LAYOUT_LD = 4,                    // [int64_t] elements between columns, >= rows
  CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,           // [int32_t] default 1
  CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6,  // [int64_t] elements between batch matrices
} cublasLtMatrixLayoutAttribute_t;

// Matmul descriptor attributes; the value types are in brackets.
typedef enum {
  CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0,                // [int32_t] cublasComputeType_t
  CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1,                  // [int32_t] cudaDataType of alpha and beta
  CUBLASLT_MATMUL_DESC_POINTER_MODE = 2,                // [int32_t] HOST (default) or DEVICE alpha/beta
  CUBLASLT_MATMUL_DESC_TRANSA = 3,                      // [int32_t] cublasOperation_t
  CUBLASLT_MATMUL_DESC_TRANSB = 4,                      // [int32_t]
  CUBLASLT_MATMUL_DESC_TRANSC = 5,                      // [int32_t] only CUBLAS_OP_N
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,                    // [uint32_t] cublasLtEpilogue_t
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,                // [void*] bias (rows of D) or bias gradient
  CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE = 10,          // [int64_t]
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,       // [void*]
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,            // [int64_t]
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE = 13,  // [int64_t]
  CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET = 15,            // [int32_t] a hint, no effect here
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE = 22,     // [int32_t] default -1: D's type
  CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,             // [int32_t] default -1: D's type
} cublasLtMatmulDescAttributes_t;

typedef enum { CUBLASLT_SEARCH_BEST_FIT = 0 } cublasLtMatmulSearch_t;

// Heuristic preferences; the value types are in brackets.
typedef enum {
  CUBLASLT_MATMUL_PREF_SEARCH_MODE = 0,            // [uint32_t] only BEST_FIT
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,    // [uint64_t] default 0
  CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = 3,  // [uint32_t] gpu-sim's algorithms reduce in place
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,  // [uint32_t] default 256
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,  // [uint32_t] default 256
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,  // [uint32_t] default 256
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,  // [uint32_t] default 256
} cublasLtMatmulPreferenceAttributes_t;

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle);
const char* cublasLtGetStatusName(cublasStatus_t status);
const char* cublasLtGetStatusString(cublasStatus_t status);
size_t cublasLtGetVersion(void);

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout);
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t sizeInBytes);
cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                void* buf, size_t sizeInBytes, size_t* sizeWritten);

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t sizeInBytes);
cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              void* buf, size_t sizeInBytes, size_t* sizeWritten);

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t sizeInBytes);
cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, void* buf,
                                                    size_t sizeInBytes, size_t* sizeWritten);

// At most one algorithm is returned (gpu-sim has one per problem).
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int* returnAlgoCount);

// D = epilogue(alpha * op(A) * op(B) + beta * C), queued on `stream`.
cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream);

}  // extern "C"
