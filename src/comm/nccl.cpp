#include "comm/nccl.hpp"

#include "core/error.hpp"

#if TRIDENT_HAVE_CUDA
#include <cuda_runtime.h>
#include <nccl.h>

#define TRIDENT_NCCL(call)                                                                  \
  do {                                                                                      \
    ncclResult_t rc_ = (call);                                                              \
    TRIDENT_CHECK(rc_ == ncclSuccess, "{} failed: {}", #call, ncclGetErrorString(rc_));    \
  } while (0)
#define TRIDENT_CUDA(call)                                                                  \
  do {                                                                                      \
    cudaError_t rc_ = (call);                                                               \
    TRIDENT_CHECK(rc_ == cudaSuccess, "{} failed: {}", #call, cudaGetErrorString(rc_));    \
  } while (0)

namespace trident {
namespace {
ncclDataType_t dtype_of(int d) {
  static const ncclDataType_t types[] = {ncclFloat32, ncclFloat64, ncclInt32, ncclInt64};
  return types[d];
}
}  // namespace

struct NcclComm::Impl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
};

NcclComm::NcclComm(MPI_Comm comm) : impl_(std::make_unique<Impl>()) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  ncclUniqueId id;
  if (rank == 0) TRIDENT_NCCL(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm);
  TRIDENT_CUDA(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking));
  TRIDENT_NCCL(ncclCommInitRank(&impl_->comm, size, id, rank));
}

NcclComm::~NcclComm() {
  if (impl_->comm) ncclCommDestroy(impl_->comm);
  if (impl_->stream) cudaStreamDestroy(impl_->stream);
}

void NcclComm::all_reduce(void* data, int64_t n, int dtype, ReduceOp op) {
  TRIDENT_NCCL(ncclAllReduce(data, data, size_t(n), dtype_of(dtype), op == ReduceOp::Sum ? ncclSum : ncclMax,
                             impl_->comm, impl_->stream));
}
void NcclComm::reduce_scatter(const void* send, void* recv, int64_t recv_count, int dtype) {
  TRIDENT_NCCL(ncclReduceScatter(send, recv, size_t(recv_count), dtype_of(dtype), ncclSum, impl_->comm, impl_->stream));
}
void NcclComm::all_gather(const void* send, void* recv, int64_t send_count, int dtype) {
  TRIDENT_NCCL(ncclAllGather(send, recv, size_t(send_count), dtype_of(dtype), impl_->comm, impl_->stream));
}
void NcclComm::broadcast(void* data, int64_t n, int dtype, int root) {
  TRIDENT_NCCL(ncclBroadcast(data, data, size_t(n), dtype_of(dtype), root, impl_->comm, impl_->stream));
}
// Point-to-point calls only enqueue; a pipeline that sends and receives between the same pair must
// bracket them with ncclGroupStart/End (the pipeline schedule does), or the two ranks deadlock.
void NcclComm::send(const void* data, int64_t n, int dtype, int peer) {
  TRIDENT_NCCL(ncclSend(data, size_t(n), dtype_of(dtype), peer, impl_->comm, impl_->stream));
}
void NcclComm::recv(void* data, int64_t n, int dtype, int peer) {
  TRIDENT_NCCL(ncclRecv(data, size_t(n), dtype_of(dtype), peer, impl_->comm, impl_->stream));
}
void NcclComm::synchronize() { TRIDENT_CUDA(cudaStreamSynchronize(impl_->stream)); }

bool NcclComm::is_device_pointer(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

}  // namespace trident

#else  // no CUDA in this build

namespace trident {

struct NcclComm::Impl {};

namespace {
[[noreturn]] void no_cuda() {
  throw Error("NCCL communicators need a CUDA build of trident (configure with -DTRIDENT_CUDA=ON)");
}
}  // namespace

NcclComm::NcclComm(MPI_Comm) { no_cuda(); }
NcclComm::~NcclComm() = default;
void NcclComm::all_reduce(void*, int64_t, int, ReduceOp) { no_cuda(); }
void NcclComm::reduce_scatter(const void*, void*, int64_t, int) { no_cuda(); }
void NcclComm::all_gather(const void*, void*, int64_t, int) { no_cuda(); }
void NcclComm::broadcast(void*, int64_t, int, int) { no_cuda(); }
void NcclComm::send(const void*, int64_t, int, int) { no_cuda(); }
void NcclComm::recv(void*, int64_t, int, int) { no_cuda(); }
void NcclComm::synchronize() { no_cuda(); }
bool NcclComm::is_device_pointer(const void*) { return false; }

}  // namespace trident
#endif
