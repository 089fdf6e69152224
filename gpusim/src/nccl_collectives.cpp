// gpu-sim's NCCL: the collectives, as non-blocking MPI collectives on staged copies of the buffers
// (nccl_internal.hpp), so in-place calls, including all-gather's and reduce-scatter's in-place
// layouts (this rank's block of the larger buffer), need nothing special. ncclAvg is a sum divided by
// the number of ranks at the end (integers: truncated, as NCCL's integer average). ncclBfloat16 goes
// over MPI as 16-bit patterns with reductions of gpu-sim's own that combine two elements in fp32 and
// round the result to bf16, as NCCL's bf16 reductions do.
#include <cstring>

#include "cuda_bf16.h"
#include "nccl_internal.hpp"

namespace gpusim::nccl {
namespace {

MPI_Datatype mpi_type(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
      return MPI_INT8_T;
    case ncclUint8:
      return MPI_UINT8_T;
    case ncclInt32:
      return MPI_INT32_T;
    case ncclUint32:
      return MPI_UINT32_T;
    case ncclInt64:
      return MPI_INT64_T;
    case ncclUint64:
      return MPI_UINT64_T;
    case ncclFloat32:
      return MPI_FLOAT;
    case ncclBfloat16:
      return MPI_UINT16_T;
    default:
      return MPI_DOUBLE;  // ncclFloat64: check_task admits no other type
  }
}

float bf16_to_float(uint16_t bits) {  // exact: the top half of an fp32 pattern
  const uint32_t u = uint32_t(bits) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

uint16_t float_to_bf16(float x) {
  const __nv_bfloat16 b = __float2bfloat16_rn(x);
  uint16_t bits;
  std::memcpy(&bits, &b, sizeof bits);
  return bits;
}

// inout[i] = combine(in[i], inout[i]) in fp32, rounded to bf16.
template <class Combine>
void bf16_op(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = float_to_bf16(Combine()(bf16_to_float(a[i]), bf16_to_float(b[i])));
}

struct Plus {
  float operator()(float a, float b) const { return a + b; }
};
struct Times {
  float operator()(float a, float b) const { return a * b; }
};
struct Larger {
  float operator()(float a, float b) const { return a > b ? a : b; }
};
struct Smaller {
  float operator()(float a, float b) const { return a < b ? a : b; }
};

MPI_Op made(MPI_User_function* f) {
  MPI_Op op;
  MPI_Op_create(f, /*commute=*/1, &op);
  return op;
}

MPI_Op bf16_mpi_op(ncclRedOp_t op) {
  static const MPI_Op sum = made(&bf16_op<Plus>), prod = made(&bf16_op<Times>), max = made(&bf16_op<Larger>),
                      min = made(&bf16_op<Smaller>);
  switch (op) {
    case ncclProd:
      return prod;
    case ncclMax:
      return max;
    case ncclMin:
      return min;
    default:
      return sum;  // ncclSum, and ncclAvg before its division
  }
}

MPI_Op mpi_op(ncclRedOp_t op, ncclDataType_t type) {
  if (type == ncclBfloat16) return bf16_mpi_op(op);
  switch (op) {
    case ncclProd:
      return MPI_PROD;
    case ncclMax:
      return MPI_MAX;
    case ncclMin:
      return MPI_MIN;
    default:
      return MPI_SUM;  // ncclSum, and ncclAvg before its division
  }
}

void divide_bf16(std::vector<char>& data, int n) {
  auto* p = reinterpret_cast<uint16_t*>(data.data());
  for (size_t i = 0; i < data.size() / 2; ++i) p[i] = float_to_bf16(bf16_to_float(p[i]) / float(n));
}

template <class T>
void divide_as(std::vector<char>& data, int n) {
  T* p = reinterpret_cast<T*>(data.data());
  for (size_t i = 0; i < data.size() / sizeof(T); ++i) p[i] = T(p[i] / T(n));
}

void divide(std::vector<char>& data, ncclDataType_t type, int n) {
  switch (type) {
    case ncclInt8:
      return divide_as<int8_t>(data, n);
    case ncclUint8:
      return divide_as<uint8_t>(data, n);
    case ncclInt32:
      return divide_as<int32_t>(data, n);
    case ncclUint32:
      return divide_as<uint32_t>(data, n);
    case ncclInt64:
      return divide_as<int64_t>(data, n);
    case ncclUint64:
      return divide_as<uint64_t>(data, n);
    case ncclFloat32:
      return divide_as<float>(data, n);
    case ncclBfloat16:
      return divide_bf16(data, n);
    default:
      return divide_as<double>(data, n);
  }
}

void stage_in(std::vector<char>& into, const void* from, size_t bytes) {
  into.assign(static_cast<const char*>(from), static_cast<const char*>(from) + bytes);
}

// Checks and hands on one collective call (root: of a broadcast or reduce only).
ncclResult_t collective(Kind kind, const char* call, const void* send, void* recv, size_t count, ncclDataType_t type,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  CommPtr c;
  ncclResult_t r = check_task(call, comm, count, type, false, &c);
  if (r == ncclSuccess && (op < 0 || op >= ncclNumOps))
    r = fail(ncclInvalidArgument,
             std::string(call) + ": reduction op " + std::to_string(int(op)) + " (gpu-sim has the built-in ones only)");
  const bool rooted = kind == Kind::Broadcast || kind == Kind::Reduce;
  if (r == ncclSuccess && rooted && (root < 0 || root >= c->size))
    r = fail(ncclInvalidArgument, std::string(call) + ": root " + std::to_string(root) + " of a communicator of " +
                                      std::to_string(c->size) + " ranks");
  if (r != ncclSuccess) return reject(r);
  return submit(Task{kind, call, std::move(c), stream, send, recv, count, type, op, root});
}

}  // namespace

std::pair<size_t, size_t> collective_extent(const Task& t) {
  const size_t bytes = t.count * type_size(t.type), all = bytes * size_t(t.comm->size);
  const bool root = t.comm->rank == t.peer;
  switch (t.kind) {
    case Kind::Broadcast:
      return {root ? bytes : 0, bytes};
    case Kind::Reduce:
      return {bytes, root ? bytes : 0};
    case Kind::AllGather:
      return {bytes, all};
    case Kind::ReduceScatter:
      return {all, bytes};
    default:
      return {bytes, bytes};  // all-reduce
  }
}

int post_collective(const Task& t, Staged& s, MPI_Request* request) {
  const auto [in, out] = collective_extent(t);
  const int n = int(t.count);
  const MPI_Datatype type = mpi_type(t.type);
  const MPI_Op op = mpi_op(t.op, t.type);
  const MPI_Comm comm = t.comm->ops;
  if (t.kind == Kind::Broadcast) {  // one buffer: the root's data leave from it, the others' arrive in it
    stage_in(s.out, t.send, in);
    s.out.resize(out);
    return MPI_Ibcast(s.out.data(), n, type, t.peer, comm, request);
  }
  stage_in(s.in, t.send, in);
  s.out.resize(out);
  switch (t.kind) {
    case Kind::Reduce:
      return MPI_Ireduce(s.in.data(), s.out.data(), n, type, op, t.peer, comm, request);
    case Kind::AllGather:
      return MPI_Iallgather(s.in.data(), n, type, s.out.data(), n, type, comm, request);
    case Kind::ReduceScatter:
      return MPI_Ireduce_scatter_block(s.in.data(), s.out.data(), n, type, op, comm, request);
    default:
      return MPI_Iallreduce(s.in.data(), s.out.data(), n, type, op, comm, request);
  }
}

void finish_collective(const Task& t, Staged& s) {
  if (t.op == ncclAvg && t.kind != Kind::Broadcast && t.kind != Kind::AllGather) divide(s.out, t.type, t.comm->size);
  if (!s.out.empty()) std::memcpy(t.recv, s.out.data(), s.out.size());
}

}  // namespace gpusim::nccl

using namespace gpusim::nccl;

extern "C" {

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  return collective(Kind::Reduce, "ncclReduce", sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  return collective(Kind::Broadcast, "ncclBroadcast", sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream);
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  return collective(Kind::AllReduce, "ncclAllReduce", sendbuff, recvbuff, count, datatype, op, -1, comm, stream);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return collective(Kind::ReduceScatter, "ncclReduceScatter", sendbuff, recvbuff, recvcount, datatype, op, -1, comm,
                    stream);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  return collective(Kind::AllGather, "ncclAllGather", sendbuff, recvbuff, sendcount, datatype, ncclSum, -1, comm,
                    stream);
}

}  // extern "C"
