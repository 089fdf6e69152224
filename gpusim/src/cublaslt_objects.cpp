// gpu-sim's cuBLASLt objects: status names, the handle, and the matmul, layout and preference
// descriptors with their attributes. Attribute values are checked for size as cuBLASLt checks them
// (the size must be the attribute's own, else CUBLAS_STATUS_INVALID_VALUE); handles and descriptors
// used after being destroyed are refused rather than read.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <sstream>
#include <unordered_set>

#include "cublaslt_internal.hpp"

namespace gpusim::lt {

namespace {

// The live handles and descriptors. Never destroyed: stream workers may still use it while the
// process exits.
struct Registry {
  std::mutex lock;
  std::unordered_set<const void*> objects;
};
Registry& registry() {
  static auto* r = new Registry;
  return *r;
}

template <class T>
cublasStatus_t create(T** out, const T& init) {
  if (!out) return fail(CUBLAS_STATUS_INVALID_VALUE, "create", "null output pointer");
  auto* object = new T(init);
  std::lock_guard<std::mutex> g(registry().lock);
  registry().objects.insert(object);
  *out = object;
  return CUBLAS_STATUS_SUCCESS;
}

template <class T>
cublasStatus_t destroy(T* object, const char* call) {
  if (!object) return CUBLAS_STATUS_SUCCESS;
  {
    std::lock_guard<std::mutex> g(registry().lock);
    if (registry().objects.erase(object) == 0) return fail(CUBLAS_STATUS_INVALID_VALUE, call, "not a live object");
  }
  delete object;
  return CUBLAS_STATUS_SUCCESS;
}

// Where an attribute lives in its object and how many bytes it has.
struct Field {
  void* at = nullptr;
  size_t size = 0;
};

template <class V>
Field field(V& v) {
  return Field{&v, sizeof v};
}

cublasStatus_t check_buffer(const char* call, Field f, const void* buf, size_t size) {
  if (!buf) return fail(CUBLAS_STATUS_INVALID_VALUE, call, "null attribute buffer");
  if (size != f.size)
    return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                "the attribute has " + std::to_string(f.size) + " bytes, " + std::to_string(size) + " given");
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t set_field(const char* call, Field f, const void* buf, size_t size) {
  if (!f.at) return fail(CUBLAS_STATUS_INVALID_VALUE, call, "unknown attribute");
  if (cublasStatus_t s = check_buffer(call, f, buf, size); s != CUBLAS_STATUS_SUCCESS) return s;
  std::memcpy(f.at, buf, size);
  return CUBLAS_STATUS_SUCCESS;
}

// sizeInBytes == 0 asks for the size (into *written); otherwise it must be the attribute's size.
cublasStatus_t get_field(const char* call, Field f, void* buf, size_t size, size_t* written) {
  if (!f.at) return fail(CUBLAS_STATUS_INVALID_VALUE, call, "unknown attribute");
  if (size == 0) {
    if (!written) return fail(CUBLAS_STATUS_INVALID_VALUE, call, "size 0 and no sizeWritten");
    *written = f.size;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (cublasStatus_t s = check_buffer(call, f, buf, size); s != CUBLAS_STATUS_SUCCESS) return s;
  std::memcpy(buf, f.at, size);
  if (written) *written = size;
  return CUBLAS_STATUS_SUCCESS;
}

Field field_of(cublasLtMatrixLayoutOpaque_st& l, cublasLtMatrixLayoutAttribute_t attr) {
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE:
      return field(l.type);
    case CUBLASLT_MATRIX_LAYOUT_ORDER:
      return field(l.order);
    case CUBLASLT_MATRIX_LAYOUT_ROWS:
      return field(l.rows);
    case CUBLASLT_MATRIX_LAYOUT_COLS:
      return field(l.cols);
    case CUBLASLT_MATRIX_LAYOUT_LD:
      return field(l.ld);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return field(l.batch_count);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return field(l.batch_stride);
  }
  return {};
}

Field field_of(cublasLtMatmulDescOpaque_st& d, cublasLtMatmulDescAttributes_t attr) {
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      return field(d.compute_type);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      return field(d.scale_type);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
      return field(d.pointer_mode);
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return field(d.transa);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return field(d.transb);
    case CUBLASLT_MATMUL_DESC_TRANSC:
      return field(d.transc);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return field(d.epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return field(d.bias);
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
      return field(d.bias_batch_stride);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      return field(d.aux);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      return field(d.aux_ld);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE:
      return field(d.aux_batch_stride);
    case CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET:
      return field(d.sm_count_target);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE:
      return field(d.aux_type);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return field(d.bias_type);
  }
  return {};
}

Field field_of(cublasLtMatmulPreferenceOpaque_st& p, cublasLtMatmulPreferenceAttributes_t attr) {
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE:
      return field(p.search_mode);
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return field(p.max_workspace);
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
      return field(p.reduction_mask);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
      return field(p.min_alignment[0]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
      return field(p.min_alignment[1]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
      return field(p.min_alignment[2]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return field(p.min_alignment[3]);
  }
  return {};
}

// Values gpu-sim cannot honour are refused when set, so that nothing runs differently from what was
// asked for.
cublasStatus_t check_settable(const cublasLtMatrixLayoutOpaque_st& l) {
  if (l.order != CUBLASLT_ORDER_COL)
    return fail(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatrixLayoutSetAttribute",
                "order " + std::to_string(l.order) + " (only CUBLASLT_ORDER_COL is simulated)");
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t check_settable(const cublasLtMatmulDescOpaque_st&) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t check_settable(const cublasLtMatmulPreferenceOpaque_st& p) {
  if (p.search_mode != CUBLASLT_SEARCH_BEST_FIT)
    return fail(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulPreferenceSetAttribute",
                "search mode " + std::to_string(p.search_mode) + " (only CUBLASLT_SEARCH_BEST_FIT is simulated)");
  return CUBLAS_STATUS_SUCCESS;
}

// Sets on a copy, checks the copy, then commits: a refused value leaves the object as it was.
template <class T, class Attr>
cublasStatus_t set_attribute(const char* call, T* object, Attr attr, const void* buf, size_t size) {
  if (!live(object)) return fail(CUBLAS_STATUS_INVALID_VALUE, call, "not a live descriptor");
  T copy = *object;
  if (cublasStatus_t s = set_field(call, field_of(copy, attr), buf, size); s != CUBLAS_STATUS_SUCCESS) return s;
  if (cublasStatus_t s = check_settable(copy); s != CUBLAS_STATUS_SUCCESS) return s;
  *object = copy;
  return CUBLAS_STATUS_SUCCESS;
}

template <class T, class Attr>
cublasStatus_t get_attribute(const char* call, T* object, Attr attr, void* buf, size_t size, size_t* written) {
  if (!live(object)) return fail(CUBLAS_STATUS_INVALID_VALUE, call, "not a live descriptor");
  return get_field(call, field_of(*object, attr), buf, size, written);
}

}  // namespace

std::string address(const void* p) {
  std::ostringstream s;
  s << p;
  return s.str();
}

bool live(const void* object) {
  std::lock_guard<std::mutex> g(registry().lock);
  return object && registry().objects.count(object) != 0;
}

cublasStatus_t fail(cublasStatus_t status, const char* call, const std::string& why) {
  std::fprintf(stderr, "gpu-sim cuBLASLt: %s: %s (%s)\n", call, why.c_str(), cublasGetStatusName(status));
  return status;
}

}  // namespace gpusim::lt

using namespace gpusim::lt;

extern "C" {

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library or the handle is not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "a resource could not be allocated";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an argument or a combination of arguments is invalid";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "the device lacks a required feature";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "accessing GPU memory failed";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the requested functionality is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "a license error occurred";
  }
  return "unknown cuBLAS status";
}

const char* cublasLtGetStatusName(cublasStatus_t status) { return cublasGetStatusName(status); }
const char* cublasLtGetStatusString(cublasStatus_t status) { return cublasGetStatusString(status); }
size_t cublasLtGetVersion(void) { return CUBLAS_VERSION; }

// A handle needs a device, as cuBLASLt needs a CUDA context.
cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle) {
  cublasLtContext context;
  if (cudaGetDevice(&context.device) != cudaSuccess)
    return fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtCreate", "no CUDA device");
  return create(lightHandle, context);
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  if (!lightHandle) return fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtDestroy", "null handle");
  return destroy(lightHandle, "cublasLtDestroy");
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  cublasLtMatrixLayoutOpaque_st l;
  l.type = uint32_t(type);
  l.rows = rows;
  l.cols = cols;
  l.ld = ld;
  return create(matLayout, l);
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  return destroy(matLayout, "cublasLtMatrixLayoutDestroy");
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t sizeInBytes) {
  return set_attribute("cublasLtMatrixLayoutSetAttribute", matLayout, attr, buf, sizeInBytes);
}

cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                void* buf, size_t sizeInBytes, size_t* sizeWritten) {
  return get_attribute("cublasLtMatrixLayoutGetAttribute", matLayout, attr, buf, sizeInBytes, sizeWritten);
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  cublasLtMatmulDescOpaque_st d;
  d.compute_type = int32_t(computeType);
  d.scale_type = int32_t(scaleType);
  return create(matmulDesc, d);
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  return destroy(matmulDesc, "cublasLtMatmulDescDestroy");
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t sizeInBytes) {
  return set_attribute("cublasLtMatmulDescSetAttribute", matmulDesc, attr, buf, sizeInBytes);
}

cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              void* buf, size_t sizeInBytes, size_t* sizeWritten) {
  return get_attribute("cublasLtMatmulDescGetAttribute", matmulDesc, attr, buf, sizeInBytes, sizeWritten);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  return create(pref, cublasLtMatmulPreferenceOpaque_st{});
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return destroy(pref, "cublasLtMatmulPreferenceDestroy");
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t sizeInBytes) {
  return set_attribute("cublasLtMatmulPreferenceSetAttribute", pref, attr, buf, sizeInBytes);
}

cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, void* buf,
                                                    size_t sizeInBytes, size_t* sizeWritten) {
  return get_attribute("cublasLtMatmulPreferenceGetAttribute", pref, attr, buf, sizeInBytes, sizeWritten);
}

}  // extern "C"
