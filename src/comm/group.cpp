#include "comm/group.hpp"

#include <sys/prctl.h>
#include <time.h>

#include "comm/nccl.hpp"
#include "comm/watchdog.hpp"
#include "core/error.hpp"

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

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::Sum ? MPI_SUM : MPI_MAX; }

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
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL && comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
}

template <class T> bool Group::on_device(const T* p) const { return nccl_ && NcclComm::is_device_pointer(p); }

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

template <class T> void Group::all_reduce(T* data, int64_t n, ReduceOp op) {
  if (size_ == 1) return;
  counters_.add(CommOp::AllReduce, n * int64_t(sizeof(T)));
  if (on_device(data)) return nccl_->all_reduce(data, n, nccl_type<T>(), op);
  if (wait_ == MpiWait::Block) {
    const watchdog::Watch watch("all_reduce", *this);
    const double start = MPI_Wtime();
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, data, count(n), mpi_type<T>(), mpi_op(op), comm_), "MPI_Allreduce");
    counters_.seconds += MPI_Wtime() - start;
    return;
  }
  MPI_Request r;
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, data, count(n), mpi_type<T>(), mpi_op(op), comm_, &r), "MPI_Iallreduce");
  wait_mpi(&r, "all_reduce");
}

template <class T> void Group::reduce_scatter(const T* send, T* recv, int64_t recv_count) {
  if (size_ > 1) counters_.add(CommOp::ReduceScatter, recv_count * size_ * int64_t(sizeof(T)));
  if (on_device(recv)) return nccl_->reduce_scatter(send, recv, recv_count, nccl_type<T>());
  MPI_Request r;
  check_mpi(MPI_Ireduce_scatter_block(send, recv, count(recv_count), mpi_type<T>(), MPI_SUM, comm_, &r),
            "MPI_Ireduce_scatter_block");
  wait_mpi(&r, "reduce_scatter");
}

template <class T> void Group::all_gather(const T* send, T* recv, int64_t send_count) {
  if (size_ > 1) counters_.add(CommOp::AllGather, send_count * size_ * int64_t(sizeof(T)));
  if (on_device(recv)) return nccl_->all_gather(send, recv, send_count, nccl_type<T>());
  MPI_Request r;
  check_mpi(MPI_Iallgather(send, count(send_count), mpi_type<T>(), recv, count(send_count), mpi_type<T>(), comm_, &r),
            "MPI_Iallgather");
  wait_mpi(&r, "all_gather");
}

template <class T> void Group::broadcast(T* data, int64_t n, int root) {
  if (size_ == 1) return;
  counters_.add(CommOp::Broadcast, n * int64_t(sizeof(T)));
  if (on_device(data)) return nccl_->broadcast(data, n, nccl_type<T>(), root);
  MPI_Request r;
  check_mpi(MPI_Ibcast(data, count(n), mpi_type<T>(), root, comm_, &r), "MPI_Ibcast");
  wait_mpi(&r, "broadcast");
}

template <class T> void Group::send(const T* data, int64_t n, int dest, int tag) {
  Request r = isend(data, n, dest, tag);
  wait(r);
}

template <class T> void Group::recv(T* data, int64_t n, int source, int tag) {
  Request r = irecv(data, n, source, tag);
  wait(r);
}

template <class T> Request Group::isend(const T* data, int64_t n, int dest, int tag) {
  counters_.add(CommOp::Send, n * int64_t(sizeof(T)));
  Request r{MPI_REQUEST_NULL, "send", dest};
  if (on_device(data)) {
    nccl_->send(data, n, nccl_type<T>(), dest);
    return r;
  }
  check_mpi(MPI_Isend(data, count(n), mpi_type<T>(), dest, tag, comm_, &r.mpi), "MPI_Isend");
  return r;
}

template <class T> Request Group::irecv(T* data, int64_t n, int source, int tag) {
  counters_.add(CommOp::Recv, n * int64_t(sizeof(T)));
  Request r{MPI_REQUEST_NULL, "recv", source};
  if (on_device(data)) {
    nccl_->recv(data, n, nccl_type<T>(), source);
    return r;
  }
  check_mpi(MPI_Irecv(data, count(n), mpi_type<T>(), source, tag, comm_, &r.mpi), "MPI_Irecv");
  return r;
}

template <class T> Request Group::iall_reduce(T* data, int64_t n, ReduceOp op) {
  Request r{MPI_REQUEST_NULL, "all_reduce"};
  if (size_ == 1) return r;
  counters_.add(CommOp::AllReduce, n * int64_t(sizeof(T)));
  if (on_device(data)) {
    nccl_->all_reduce(data, n, nccl_type<T>(), op);
    return r;
  }
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, data, count(n), mpi_type<T>(), mpi_op(op), comm_, &r.mpi),
            "MPI_Iallreduce");
  return r;
}

template <class T> Request Group::ireduce(T* data, int64_t n, int root) {
  Request r{MPI_REQUEST_NULL, "reduce"};
  if (size_ == 1) return r;
  counters_.add(CommOp::Reduce, n * int64_t(sizeof(T)));
  TRIDENT_CHECK(!on_device(data), "Group::ireduce: device buffers are not supported (NCCL path not built)");
  const void* send = rank_ == root ? MPI_IN_PLACE : static_cast<const void*>(data);
  check_mpi(MPI_Ireduce(send, data, count(n), mpi_type<T>(), MPI_SUM, root, comm_, &r.mpi), "MPI_Ireduce");
  return r;
}

template <class T> Request Group::ibroadcast(T* data, int64_t n, int root) {
  Request r{MPI_REQUEST_NULL, "broadcast"};
  if (size_ == 1) return r;
  counters_.add(CommOp::Broadcast, n * int64_t(sizeof(T)));
  TRIDENT_CHECK(!on_device(data), "Group::ibroadcast: device buffers are not supported (NCCL path not built)");
  check_mpi(MPI_Ibcast(data, count(n), mpi_type<T>(), root, comm_, &r.mpi), "MPI_Ibcast");
  return r;
}

void Group::wait(Request& r) {
  if (r.mpi != MPI_REQUEST_NULL) wait_mpi(&r.mpi, r.operation, r.peer);
  r.mpi = MPI_REQUEST_NULL;
  if (nccl_) nccl_->synchronize();
}

void Group::wait_all(std::vector<Request>& rs) {
  for (auto& r : rs) wait(r);
}

bool Group::test(Request& r) {
  if (r.mpi == MPI_REQUEST_NULL) return true;
  int done = 0;
  check_mpi(MPI_Test(&r.mpi, &done, MPI_STATUS_IGNORE), "MPI_Test");
  return done != 0;
}

void Group::barrier() {
  if (size_ == 1) return;
  MPI_Request r;
  check_mpi(MPI_Ibarrier(comm_, &r), "MPI_Ibarrier");
  wait_mpi(&r, "barrier");
}

void Group::attach_nccl() {
  if (!nccl_) nccl_ = std::make_unique<NcclComm>(comm_);
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
  template Request Group::ibroadcast<T>(T*, int64_t, int);
TRIDENT_GROUP_TYPES(float)
TRIDENT_GROUP_TYPES(double)
TRIDENT_GROUP_TYPES(int32_t)
TRIDENT_GROUP_TYPES(int64_t)
#undef TRIDENT_GROUP_TYPES

}  // namespace trident
