#include "comm/group.hpp"

#include <sys/prctl.h>
#include <time.h>

#include "comm/nccl.hpp"
#include "comm/staging.hpp"
#include "comm/watchdog.hpp"
#include "core/bf16.hpp"
#include "core/error.hpp"
#include "cuda_module.hpp"

namespace trident {
namespace {

template <class T> MPI_Datatype mpi_type();
template <> MPI_Datatype mpi_type<float>() { return MPI_FLOAT; }
template <> MPI_Datatype mpi_type<double>() { return MPI_DOUBLE; }
template <> MPI_Datatype mpi_type<int32_t>() { return MPI_INT32_T; }
template <> MPI_Datatype mpi_type<int64_t>() { return MPI_INT64_T; }

template <class T> int nccl_type();
template <> int nccl_type<float>() { return 0; }
template <> int nccl_type<double>() { return 1; }
template <> int nccl_type<int32_t>() { return 2; }
template <> int nccl_type<int64_t>() { return 3; }

template <> MPI_Datatype mpi_type<Bf16>() { return MPI_UINT16_T; }
template <> int nccl_type<Bf16>() { return 4; }

// bf16 elements summed in fp32, each sum rounded back to bf16 (MPI applies it pairwise as its
// algorithm combines the ranks' buffers).
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = bf16_bits(bf16_value(a[i]) + bf16_value(b[i]));
}

template <class T> MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::Sum ? MPI_SUM : MPI_MAX; }
template <> MPI_Op mpi_op<Bf16>(ReduceOp op) {
  TRIDENT_CHECK(op == ReduceOp::Sum, "internal: bf16 buffers are only summed");
  static const MPI_Op sum = [] {
    MPI_Op created;
    MPI_Op_create(&bf16_sum, /*commute=*/1, &created);
    return created;
  }();
  return sum;
}

// MPI counts are int; larger messages would need derived datatypes, which nothing here sends.
int count(int64_t n) {
  TRIDENT_CHECK(n >= 0 && n <= INT32_MAX, "message of {} elements exceeds MPI's int count", n);
  return static_cast<int>(n);
}

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  TRIDENT_FAIL("{} failed: {}", what, std::string(msg, len));
}

}  // namespace

const char* to_string(TensorTransport t) {
  static const char* names[] = {"mpi (host memory)", "nccl", "mpi (staged through pinned host memory)"};
  return names[static_cast<int>(t)];
}

const char* to_string(CommOp op) {
  static const char* names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "send", "recv", "reduce"};
  return names[static_cast<int>(op)];
}

int64_t CommCounters::total_bytes() const {
  int64_t t = 0;
  for (auto b : bytes) t += b;
  return t;
}

Group::Group(std::string name, MPI_Comm comm, std::vector<int> world_ranks, MpiWait wait)
    : name_(std::move(name)), comm_(comm), world_ranks_(std::move(world_ranks)), wait_(wait) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  // Errors come back as codes so they end up in one clear message instead of MPICH's default abort.
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  // Poll mode's first pauses are 2 us; Linux's default 50 us timer slack would stretch them 25-fold.
  if (wait_ == MpiWait::Poll) prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
}

Group::~Group() {
  nccl_.reset();
  staging_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL && comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
}

// Waiting: MPICH's blocking waits busy-poll, which starves other ranks when there are more ranks than
// cores; "poll" tests and sleeps 2 to 64 microseconds instead (see docs/architecture.md).
void Group::wait_mpi(MPI_Request* r, const char* operation, int peer) {
  const watchdog::Watch watch(operation, *this, peer);
  const double start = MPI_Wtime();
  if (wait_ == MpiWait::Block) {
    check_mpi(MPI_Wait(r, MPI_STATUS_IGNORE), "MPI_Wait");
  } else {
    // The pause doubles from 2 us to 64 us: a short wait ends within microseconds, a long one leaves
    // the cores to the ranks being waited for. Against a fixed 2 us pause, a tiny tp 2 x pp 2 x dp 2
    // step at 8 ranks on 2 cores went from 400 to 46 ms, 4 ranks 102 -> 33 ms, 2 ranks 17 -> 18 ms.
    long pause_ns = 2000;
    int done = 0;
    for (;;) {
      check_mpi(MPI_Test(r, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (done) break;
      const timespec pause{0, pause_ns};
      nanosleep(&pause, nullptr);
      pause_ns = std::min(2 * pause_ns, 64000L);
    }
  }
  counters_.seconds += MPI_Wtime() - start;
}

void Group::use_nccl(void* compute_stream, bool point_to_point) {
  TRIDENT_CHECK(transport_ == TensorTransport::Host, "internal: group '{}' is given its tensor transport twice",
                name_);
  nccl_ = cuda_module().make_nccl(comm_, compute_stream, *this, point_to_point);
  transport_ = TensorTransport::Nccl;
}

void Group::use_staging(std::unique_ptr<DeviceCopies> copies) {
  TRIDENT_CHECK(transport_ == TensorTransport::Host, "internal: group '{}' is given its tensor transport twice",
                name_);
  staging_ = std::make_unique<HostStaging>(std::move(copies));
  transport_ = TensorTransport::Staged;
}

template <class T> T* Group::mpi_side(const T* in, T* out, int64_t n, Request& r) {
  if (transport_ == TensorTransport::Host) return out ? out : const_cast<T*>(in);
  r.transfer = staging_->begin(in, out, n * int64_t(sizeof(T)));
  return static_cast<T*>(staging_->host(r.transfer));
}

void Group::finish(Request& r) {
  if (r.transfer < 0) return;
  const int slot = r.transfer;
  r.transfer = -1;
  if (transport_ == TensorTransport::Staged) staging_->finish(slot);
  if (transport_ == TensorTransport::Nccl) nccl_->wait(slot);
}

// ---- host values over MPI ----

template <class T> void Group::mpi_all_reduce(T* data, int64_t n, ReduceOp op) {
  if (wait_ == MpiWait::Block) {
    const watchdog::Watch watch("all_reduce", *this);
    const double start = MPI_Wtime();
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, data, count(n), mpi_type<T>(), mpi_op<T>(op), comm_), "MPI_Allreduce");
    counters_.seconds += MPI_Wtime() - start;
    return;
  }
  MPI_Request r;
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, data, count(n), mpi_type<T>(), mpi_op<T>(op), comm_, &r), "MPI_Iallreduce");
  wait_mpi(&r, "all_reduce");
}

template <class T> void Group::mpi_all_gather(const T* send, T* recv, int64_t send_count) {
  MPI_Request r;
  check_mpi(MPI_Iallgather(send, count(send_count), mpi_type<T>(), recv, count(send_count), mpi_type<T>(), comm_, &r),
            "MPI_Iallgather");
  wait_mpi(&r, "all_gather");
}

template <class T> void Group::mpi_broadcast(T* data, int64_t n, int root) {
  MPI_Request r;
  check_mpi(MPI_Ibcast(data, count(n), mpi_type<T>(), root, comm_, &r), "MPI_Ibcast");
  wait_mpi(&r, "broadcast");
}

template <class T> void Group::all_reduce_host(T* data, int64_t n, ReduceOp op) {
  if (size_ == 1) return;
  counters_.add(CommOp::AllReduce, n * int64_t(sizeof(T)));
  mpi_all_reduce(data, n, op);
}

template <class T> void Group::all_gather_host(const T* send, T* recv, int64_t send_count) {
  if (size_ > 1) counters_.add(CommOp::AllGather, send_count * size_ * int64_t(sizeof(T)));
  mpi_all_gather(send, recv, send_count);
}

template <class T> void Group::broadcast_host(T* data, int64_t n, int root) {
  if (size_ == 1) return;
  counters_.add(CommOp::Broadcast, n * int64_t(sizeof(T)));
  mpi_broadcast(data, n, root);
}

// ---- tensors ----
// NCCL enqueues on its stream and orders the compute stream after it (a group of one rank included:
// NCCL is exercised, not skipped); MPI works on the tensor (Host) or its staged host copy (Staged).

template <class T> void Group::all_reduce(T* data, int64_t n, ReduceOp op) {
  if (transport_ == TensorTransport::Nccl) {
    if (size_ > 1) counters_.add(CommOp::AllReduce, n * int64_t(sizeof(T)));
    return nccl_->wait(nccl_->all_reduce(data, n, nccl_type<T>(), op));
  }
  if (size_ == 1) return;
  counters_.add(CommOp::AllReduce, n * int64_t(sizeof(T)));
  Request r;
  mpi_all_reduce(mpi_side<T>(data, data, n, r), n, op);
  finish(r);
}

template <class T> void Group::reduce_scatter(const T* send, T* recv, int64_t recv_count) {
  if (size_ > 1) counters_.add(CommOp::ReduceScatter, recv_count * size_ * int64_t(sizeof(T)));
  if (transport_ == TensorTransport::Nccl)
    return nccl_->wait(nccl_->reduce_scatter(send, recv, recv_count, nccl_type<T>()));
  Request in, out;
  const T* s = mpi_side<T>(send, nullptr, recv_count * size_, in);
  T* d = mpi_side<T>(nullptr, recv, recv_count, out);
  MPI_Request r;
  check_mpi(MPI_Ireduce_scatter_block(s, d, count(recv_count), mpi_type<T>(), MPI_SUM, comm_, &r),
            "MPI_Ireduce_scatter_block");
  wait_mpi(&r, "reduce_scatter");
  finish(in);
  finish(out);
}

template <class T> void Group::all_gather(const T* send, T* recv, int64_t send_count) {
  if (size_ > 1) counters_.add(CommOp::AllGather, send_count * size_ * int64_t(sizeof(T)));
  if (transport_ == TensorTransport::Nccl)
    return nccl_->wait(nccl_->all_gather(send, recv, send_count, nccl_type<T>()));
  Request in, out;
  const T* s = mpi_side<T>(send, nullptr, send_count, in);
  T* d = mpi_side<T>(nullptr, recv, send_count * size_, out);
  mpi_all_gather(s, d, send_count);
  finish(in);
  finish(out);
}

template <class T> void Group::broadcast(T* data, int64_t n, int root) {
  Request r = ibroadcast(data, n, root);
  wait(r);
}

template <class T> void Group::send(const T* data, int64_t n, int dest, int tag) {
  Request r = isend(data, n, dest, tag);
  wait(r);
}

template <class T> void Group::recv(T* data, int64_t n, int source, int tag) {
  Request r = irecv(data, n, source, tag);
  wait(r);
}

// NCCL matches point-to-point transfers by order, not by tag: the pipeline's tags only order its own
// receives, which it posts in the same order on both sides.
template <class T> Request Group::isend(const T* data, int64_t n, int dest, int tag) {
  counters_.add(CommOp::Send, n * int64_t(sizeof(T)));
  Request r{MPI_REQUEST_NULL, "send", dest};
  if (transport_ == TensorTransport::Nccl) {
    r.transfer = nccl_->send(data, n, nccl_type<T>(), dest);
    return r;
  }
  const T* buf = mpi_side<T>(data, nullptr, n, r);
  check_mpi(MPI_Isend(buf, count(n), mpi_type<T>(), dest, tag, comm_, &r.mpi), "MPI_Isend");
  return r;
}

template <class T> Request Group::irecv(T* data, int64_t n, int source, int tag) {
  counters_.add(CommOp::Recv, n * int64_t(sizeof(T)));
  Request r{MPI_REQUEST_NULL, "recv", source};
  if (transport_ == TensorTransport::Nccl) {
    r.transfer = nccl_->recv(data, n, nccl_type<T>(), source);
    return r;
  }
  T* buf = mpi_side<T>(nullptr, data, n, r);
  check_mpi(MPI_Irecv(buf, count(n), mpi_type<T>(), source, tag, comm_, &r.mpi), "MPI_Irecv");
  return r;
}

template <class T> Request Group::iall_reduce(T* data, int64_t n, ReduceOp op) {
  Request r{MPI_REQUEST_NULL, "all_reduce"};
  if (transport_ == TensorTransport::Nccl) {
    if (size_ > 1) counters_.add(CommOp::AllReduce, n * int64_t(sizeof(T)));
    r.transfer = nccl_->all_reduce(data, n, nccl_type<T>(), op);
    return r;
  }
  if (size_ == 1) return r;
  counters_.add(CommOp::AllReduce, n * int64_t(sizeof(T)));
  T* buf = mpi_side<T>(data, data, n, r);
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, buf, count(n), mpi_type<T>(), mpi_op<T>(op), comm_, &r.mpi),
            "MPI_Iallreduce");
  return r;
}

template <class T> Request Group::ireduce(T* data, int64_t n, int root) {
  Request r{MPI_REQUEST_NULL, "reduce"};
  if (transport_ == TensorTransport::Nccl) {
    if (size_ > 1) counters_.add(CommOp::Reduce, n * int64_t(sizeof(T)));
    r.transfer = nccl_->reduce(data, n, nccl_type<T>(), root);
    return r;
  }
  if (size_ == 1) return r;
  counters_.add(CommOp::Reduce, n * int64_t(sizeof(T)));
  T* buf = mpi_side<T>(data, rank_ == root ? data : nullptr, n, r);  // only the root's sum comes back
  const void* send = rank_ == root ? MPI_IN_PLACE : static_cast<const void*>(buf);
  check_mpi(MPI_Ireduce(send, buf, count(n), mpi_type<T>(), mpi_op<T>(ReduceOp::Sum), root, comm_, &r.mpi),
            "MPI_Ireduce");
  return r;
}

template <class T> Request Group::ibroadcast(T* data, int64_t n, int root) {
  Request r{MPI_REQUEST_NULL, "broadcast"};
  if (transport_ == TensorTransport::Nccl) {
    if (size_ > 1) counters_.add(CommOp::Broadcast, n * int64_t(sizeof(T)));
    r.transfer = nccl_->broadcast(data, n, nccl_type<T>(), root);
    return r;
  }
  if (size_ == 1) return r;
  counters_.add(CommOp::Broadcast, n * int64_t(sizeof(T)));
  const bool root_side = rank_ == root;
  T* buf = mpi_side<T>(root_side ? data : nullptr, root_side ? nullptr : data, n, r);
  check_mpi(MPI_Ibcast(buf, count(n), mpi_type<T>(), root, comm_, &r.mpi), "MPI_Ibcast");
  return r;
}

void Group::wait(Request& r) {
  if (r.mpi != MPI_REQUEST_NULL) wait_mpi(&r.mpi, r.operation, r.peer);
  r.mpi = MPI_REQUEST_NULL;
  finish(r);
}

void Group::wait_all(std::vector<Request>& rs) {
  for (auto& r : rs) wait(r);
}

bool Group::test(Request& r) {
  if (r.mpi != MPI_REQUEST_NULL) {
    int done = 0;
    check_mpi(MPI_Test(&r.mpi, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (!done) return false;
  }
  if (transport_ == TensorTransport::Nccl && r.transfer >= 0 && !nccl_->done(r.transfer)) return false;
  finish(r);
  return true;
}

std::vector<std::string> Group::gather_strings_host(const std::string& mine) {
  const int length = count(int64_t(mine.size()));
  std::vector<int> lengths(static_cast<size_t>(size_)), offsets(static_cast<size_t>(size_));
  MPI_Request r;
  check_mpi(MPI_Igather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, comm_, &r), "MPI_Igather");
  wait_mpi(&r, "gather");
  std::string all;
  if (rank_ == 0) {
    for (int i = 0, offset = 0; i < size_; offset += lengths[size_t(i)], ++i) offsets[size_t(i)] = offset;
    all.resize(size_t(offsets.back() + lengths.back()));
  }
  check_mpi(MPI_Igatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, 0,
                         comm_, &r),
            "MPI_Igatherv");
  wait_mpi(&r, "gather");
  std::vector<std::string> texts;
  if (rank_ == 0)
    for (int i = 0; i < size_; ++i) texts.push_back(all.substr(size_t(offsets[size_t(i)]), size_t(lengths[size_t(i)])));
  return texts;
}

void Group::barrier() {
  if (size_ == 1) return;
  MPI_Request r;
  check_mpi(MPI_Ibarrier(comm_, &r), "MPI_Ibarrier");
  wait_mpi(&r, "barrier");
}

#define TRIDENT_GROUP_TYPES(T)                                                        \
  template void Group::all_reduce<T>(T*, int64_t, ReduceOp);                          \
  template void Group::reduce_scatter<T>(const T*, T*, int64_t);                      \
  template void Group::all_gather<T>(const T*, T*, int64_t);                          \
  template void Group::broadcast<T>(T*, int64_t, int);                                \
  template void Group::send<T>(const T*, int64_t, int, int);                          \
  template void Group::recv<T>(T*, int64_t, int, int);                                \
  template Request Group::isend<T>(const T*, int64_t, int, int);                      \
  template Request Group::irecv<T>(T*, int64_t, int, int);                            \
  template Request Group::iall_reduce<T>(T*, int64_t, ReduceOp);                      \
  template Request Group::ireduce<T>(T*, int64_t, int);                               \
  template Request Group::ibroadcast<T>(T*, int64_t, int);                           \
  template void Group::all_reduce_host<T>(T*, int64_t, ReduceOp);                     \
  template void Group::all_gather_host<T>(const T*, T*, int64_t);                     \
  template void Group::broadcast_host<T>(T*, int64_t, int);
TRIDENT_GROUP_TYPES(float)
TRIDENT_GROUP_TYPES(double)
// mesh.grad_reduce_dtype = "bf16": the data-parallel gradient reductions (ZeRO-2 and 3 reduce to owners);
// a bf16 working copy: the ZeRO parameter broadcast and gathers.
template Request Group::iall_reduce<Bf16>(Bf16*, int64_t, ReduceOp);
template Request Group::ireduce<Bf16>(Bf16*, int64_t, int);
template Request Group::ibroadcast<Bf16>(Bf16*, int64_t, int);
TRIDENT_GROUP_TYPES(int32_t)
TRIDENT_GROUP_TYPES(int64_t)
#undef TRIDENT_GROUP_TYPES

}  // namespace trident
