// gpu-sim's cuBLASLt: the heuristic and the host side of cublasLtMatmul.
//
// The heuristic returns one algorithm, which records in its 64 bytes what it was chosen for: the
// data and compute type, the alignment of each operand (the MIN_ALIGNMENT_* preferences, 256 bytes
// unless set, as in cuBLASLt; for the bias, the alignment of the descriptor's bias pointer at the
// time of the query, which cuBLASLt documents it reads), and its workspace: 4 KiB when the
// preference's MAX_WORKSPACE_BYTES allows that much, else none (cuBLASLt also finds algorithms that
// need no workspace; its default maximum is 0).
//
// cublasLtMatmul then checks on the host what cuBLASLt checks: descriptors and layouts as the
// heuristic does, a workspace smaller than the algorithm needs (CUBLAS_STATUS_INVALID_VALUE, as
// cuBLASLt documents), and pointers less aligned than the algorithm was chosen for. cuBLASLt
// documents no status for the last; it is CUBLAS_STATUS_NOT_SUPPORTED here, the status that
// applications (PyTorch among them) have reported from cublasLtMatmul for under-aligned operands.
#include <cuda_runtime.h>

#include <algorithm>
#include <gpusim/runtime.hpp>

#include "cublaslt_internal.hpp"

namespace gpusim::lt {
namespace {

using Desc = cublasLtMatmulDescOpaque_st;
constexpr cublasStatus_t kOk = CUBLAS_STATUS_SUCCESS;
constexpr cublasStatus_t kInvalid = CUBLAS_STATUS_INVALID_VALUE;
constexpr uint64_t kMagic = 0x544c4d4953555047ull;  // "GPUSIMLT"
constexpr uint64_t kAlgoWorkspaceBytes = 4096;
constexpr uint64_t kMaxAlignment = 256;
const char* const kOperandNames[5] = {"A", "B", "C", "D", "bias"};

// What an algorithm was chosen for (cublasLtMatmulAlgo_t: magic, workspace, alignments, types).
struct AlgoRecord {
  uint64_t workspace = 0;
  uint64_t alignment[5] = {};  // bytes that A, B, C, D and the bias pointer must be aligned to
  uint64_t types = 0;
};

uint64_t types_of(const Desc& desc, const Problem& p) {
  return uint64_t(uint32_t(desc.compute_type)) << 32 | uint64_t(p.scalar);
}

cublasLtMatmulAlgo_t encode(const AlgoRecord& r) {
  cublasLtMatmulAlgo_t algo{};
  algo.data[0] = kMagic;
  algo.data[1] = r.workspace;
  std::copy(r.alignment, r.alignment + 5, algo.data + 2);
  algo.data[7] = r.types;
  return algo;
}

bool decode(const cublasLtMatmulAlgo_t& algo, AlgoRecord& r) {
  if (algo.data[0] != kMagic) return false;
  r.workspace = algo.data[1];
  std::copy(algo.data + 2, algo.data + 7, r.alignment);
  r.types = algo.data[7];
  return true;
}

// The largest power of two dividing the address, up to 256 (a null pointer counts as 256).
uint64_t alignment_of(const void* p) {
  const auto a = uint64_t(reinterpret_cast<uintptr_t>(p));
  uint64_t align = kMaxAlignment;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

cublasStatus_t check_live(const char* call, cublasLtHandle_t handle, const void* const objects[], int count) {
  if (!live(handle)) return fail(CUBLAS_STATUS_NOT_INITIALIZED, call, "null or destroyed handle");
  for (int i = 0; i < count; ++i)
    if (!live(objects[i])) return fail(kInvalid, call, "null or destroyed descriptor or layout");
  return kOk;
}

// Operands that will be read or written must be there; C may be null when beta is a host zero.
cublasStatus_t check_pointers(const char* call, const Job& job, bool beta_is_host_zero) {
  const Problem& p = job.p;
  if ((!job.A && p.a.extent(p.batch) > 0) || (!job.B && p.b.extent(p.batch) > 0) || (!job.D && p.d.extent(p.batch) > 0))
    return fail(kInvalid, call, "null A, B or D");
  if (!job.C && !beta_is_host_zero) return fail(kInvalid, call, "null C with a beta that may be nonzero");
  if (job.C && job.C == job.D && (p.c.ld != p.d.ld || p.c.batch_stride != p.d.batch_stride))
    return fail(kInvalid, call, "in place (C == D) with C's layout different from D's");
  if (p.epilogue.reads_bias_pointer() && !p.bias && p.bias_length > 0)
    return fail(kInvalid, call, "the epilogue needs CUBLASLT_MATMUL_DESC_BIAS_POINTER");
  if (p.epilogue.aux && !p.aux)
    return fail(kInvalid, call, "the epilogue needs CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER");
  return kOk;
}

// The algorithm given, or (algo == nullptr, as cuBLASLt allows) one chosen for these very pointers
// with no workspace.
cublasStatus_t algo_for(const char* call, const cublasLtMatmulAlgo_t* algo, const Desc& desc, const Job& job,
                        AlgoRecord& r) {
  if (!algo) {
    const void* const pointers[5] = {job.A, job.B, job.C, job.D, job.p.bias};
    for (int i = 0; i < 5; ++i) r.alignment[i] = alignment_of(pointers[i]);
    r.types = types_of(desc, job.p);
    return kOk;
  }
  if (!decode(*algo, r)) return fail(kInvalid, call, "the algorithm did not come from cublasLtMatmulAlgoGetHeuristic");
  if (r.types != types_of(desc, job.p))
    return fail(CUBLAS_STATUS_NOT_SUPPORTED, call, "the algorithm was chosen for another compute or data type");
  return kOk;
}

cublasStatus_t check_alignment(const char* call, const AlgoRecord& r, const Job& job) {
  const void* const pointers[5] = {job.A, job.B, job.C, job.D,
                                   job.p.epilogue.reads_bias_pointer() ? job.p.bias : nullptr};
  for (int i = 0; i < 5; ++i) {
    const auto where = uint64_t(reinterpret_cast<uintptr_t>(pointers[i]));
    if (r.alignment[i] > 1 && where % r.alignment[i] != 0)
      return fail(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  std::string(kOperandNames[i]) + " at " + address(pointers[i]) + " is " +
                      std::to_string(alignment_of(pointers[i])) + "-byte aligned; the algorithm was chosen for " +
                      std::to_string(r.alignment[i]) + "-byte aligned " + kOperandNames[i] +
                      (i < 4 ? " (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES, 256 unless set)"
                             : " (the bias pointer's alignment when the heuristic ran)"));
  }
  return kOk;
}

cublasStatus_t check_workspace(const char* call, const AlgoRecord& r, const void* workspace, size_t bytes) {
  if (bytes >= r.workspace && (r.workspace == 0 || workspace)) return kOk;
  return fail(kInvalid, call,
              "workspace of " + std::to_string(bytes) + " bytes at " + address(workspace) + "; the algorithm needs " +
                  std::to_string(r.workspace));
}

// Host-mode alpha and beta are read now, as cuBLASLt reads them before returning. The bias gradient
// epilogues run only with alpha = 1: whether cuBLASLt scales the gradient by alpha is not documented.
cublasStatus_t take_scalars(const char* call, const void* alpha, const void* beta, Job& job) {
  if (job.p.device_scalars) {
    job.alpha_ptr = alpha;
    job.beta_ptr = beta;
  } else {
    job.alpha = scalar_value(alpha, job.p.scalar);
    job.beta = scalar_value(beta, job.p.scalar);
  }
  const Epilogue& e = job.p.epilogue;
  if ((e.bgrad_a || e.bgrad_b) && (job.p.device_scalars || job.alpha != 1.0))
    return fail(CUBLAS_STATUS_NOT_SUPPORTED, call,
                epilogue_name(e.bgrad_a ? CUBLASLT_EPILOGUE_BGRADA : CUBLASLT_EPILOGUE_BGRADB) +
                    " with alpha other than a host 1 is not simulated");
  return kOk;
}

}  // namespace
}  // namespace gpusim::lt

using namespace gpusim::lt;

extern "C" {

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int* returnAlgoCount) {
  const char* call = "cublasLtMatmulAlgoGetHeuristic";
  if (returnAlgoCount) *returnAlgoCount = 0;
  const void* const objects[6] = {operationDesc, Adesc, Bdesc, Cdesc, Ddesc, preference};
  if (cublasStatus_t s = check_live(call, lightHandle, objects, 6); s != kOk) return s;
  if (requestedAlgoCount <= 0 || !heuristicResultsArray || !returnAlgoCount)
    return fail(kInvalid, call, "requestedAlgoCount <= 0 or a null result pointer");
  Problem p;
  if (cublasStatus_t s = resolve(call, *operationDesc, *Adesc, *Bdesc, *Cdesc, *Ddesc, p); s != kOk) return s;
  AlgoRecord r;
  for (int i = 0; i < 4; ++i)
    r.alignment[i] = std::max<uint64_t>(preference->min_alignment[i], i < 2 ? p.ab_element_bytes : p.element_bytes);
  r.alignment[4] = std::max<uint64_t>(alignment_of(operationDesc->bias), p.element_bytes);
  r.workspace = preference->max_workspace >= kAlgoWorkspaceBytes ? kAlgoWorkspaceBytes : 0;
  r.types = types_of(*operationDesc, p);
  heuristicResultsArray[0] = cublasLtMatmulHeuristicResult_t{encode(r), size_t(r.workspace), kOk, 1.0f, {}};
  *returnAlgoCount = 1;
  return kOk;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream) {
  const char* call = "cublasLtMatmul";
  const void* const objects[5] = {computeDesc, Adesc, Bdesc, Cdesc, Ddesc};
  if (cublasStatus_t s = check_live(call, lightHandle, objects, 5); s != kOk) return s;
  if (!alpha || !beta) return fail(kInvalid, call, "null alpha or beta");
  Job job;
  if (cublasStatus_t s = resolve(call, *computeDesc, *Adesc, *Bdesc, *Cdesc, *Ddesc, job.p); s != kOk) return s;
  job.A = A;
  job.B = B;
  job.C = C;
  job.D = D;
  if (cublasStatus_t s = take_scalars(call, alpha, beta, job); s != kOk) return s;
  if (cublasStatus_t s = check_pointers(call, job, !job.p.device_scalars && job.beta == 0); s != kOk) return s;
  AlgoRecord r;
  if (cublasStatus_t s = algo_for(call, algo, *computeDesc, job, r); s != kOk) return s;
  if (cublasStatus_t s = check_alignment(call, r, job); s != kOk) return s;
  if (cublasStatus_t s = check_workspace(call, r, workspace, workspaceSizeInBytes); s != kOk) return s;
  job.workspace = workspace;
  job.workspace_bytes = size_t(r.workspace);
  const cudaError_t e = gpusim::enqueue(stream, "cublasLtMatmul", [job] { run(job); });
  if (e != cudaSuccess)
    return fail(CUBLAS_STATUS_EXECUTION_FAILED, call, std::string("not queued: ") + cudaGetErrorName(e));
  return kOk;
}

}  // extern "C"
