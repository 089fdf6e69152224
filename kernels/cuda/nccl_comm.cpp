// The NCCL transport of a group (comm/nccl.hpp) on the CUDA module's streams.
#include "comm/nccl.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "comm/watchdog.hpp"
#include "core/error.hpp"
#include "cuda/module_parts.hpp"

#define TRIDENT_NCCL(call)                                                                              \
  do {                                                                                                  \
    ncclResult_t rc_ = (call);                                                                          \
    TRIDENT_CHECK(rc_ == ncclSuccess, "{} failed: {} ({}:{})", #call, ncclGetErrorString(rc_), __FILE__, \
                  __LINE__);                                                                            \
  } while (0)
#define TRIDENT_CUDA(call)                                                                              \
  do {                                                                                                  \
    cudaError_t rc_ = (call);                                                                           \
    TRIDENT_CHECK(rc_ == cudaSuccess, "{} failed: {} ({}:{})", #call, cudaGetErrorString(rc_), __FILE__, \
                  __LINE__);                                                                            \
  } while (0)

namespace trident::cuda {
namespace {

ncclDataType_t dtype_of(int d) {
  static const ncclDataType_t types[] = {ncclFloat32, ncclFloat64, ncclInt32, ncclInt64, ncclBfloat16};
  return types[d];
}

struct NcclState final : watchdog::DeviceWork {
  // A slot is taken from its operation's call to its wait, and watched (by the monitor) from its issue
  // to its completion on the device, which may come after the wait: a waited slot is reused only once
  // its event has completed.
  struct Slot {
    cudaEvent_t done = nullptr;
    bool busy = false;    // taken and not waited for yet
    bool issued = false;  // false: a point-to-point transfer still held back
    const char* operation = "";
    int peer = -1;
    double start_s = 0;
  };

  // A one-way point-to-point link to or from one peer: a 2-rank communicator and a stream of its own.
  struct Channel {
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
    int peer = 0;  // the peer's rank inside `comm`
  };

  const Group& owner;
  cudaStream_t compute;
  cudaStream_t stream = nullptr;  // collectives, and transfers to this rank itself
  cudaEvent_t ready = nullptr;    // recorded on compute before each issue
  ncclComm_t comm = nullptr;
  std::map<int, Channel> to, from;  // by the peer's group rank
  int device = 0;
  int rank = 0;
  std::mutex mutex;  // the monitor thread reads the slots
  std::vector<Slot> slots;
  // Transfers to this rank itself (a group of one): NCCL runs a send to self only with its receive in
  // the same ncclGroupStart/End, so they are held until a send, a wait or a collective issues them all.
  struct SelfTransfer {
    bool send;
    int slot;
    void* data;
    int64_t count;
    int dtype;
  };
  std::vector<SelfTransfer> to_self;
  // An NCCL call may block on the host (its first use of a peer connects to it): the monitor sees that
  // through these, without the mutex the caller holds.
  std::atomic<double> in_call_since{0};
  std::atomic<const char*> in_call{""};

  struct InCall {
    NcclState& m;
    InCall(NcclState& impl, const char* operation) : m(impl) {
      m.in_call = operation;
      m.in_call_since = watchdog::now_s();
    }
    ~InCall() { m.in_call_since = 0; }
  };

  NcclState(const Group& g, cudaStream_t c) : owner(g), compute(c) {}

  // ---- called with the mutex held ----
  bool completed(const Slot& s) {
    const cudaError_t rc = cudaEventQuery(s.done);
    if (rc == cudaErrorNotReady) cudaGetLastError();  // "not ready" is no error of the next call
    return rc != cudaErrorNotReady;
  }
  int take(const char* operation, int peer) {
    size_t i = 0;
    while (i < slots.size() && (slots[i].busy || (slots[i].issued && !completed(slots[i])))) ++i;
    if (i == slots.size()) {
      slots.emplace_back();
      TRIDENT_CUDA(cudaEventCreateWithFlags(&slots[i].done, cudaEventDisableTiming));
    }
    Slot& s = slots[i];
    s.busy = true;
    s.issued = false;
    s.operation = operation;
    s.peer = peer;
    return int(i);
  }
  // A communication stream takes up what the compute stream has queued so far.
  void after_compute(cudaStream_t on) {
    TRIDENT_CUDA(cudaEventRecord(ready, compute));
    TRIDENT_CUDA(cudaStreamWaitEvent(on, ready, 0));
  }
  void issued(int slot, cudaStream_t on) {
    Slot& s = slots[size_t(slot)];
    TRIDENT_CUDA(cudaEventRecord(s.done, on));
    s.issued = true;
    s.start_s = watchdog::now_s();
  }
  // The held transfers to self, as one NCCL group on the main communicator.
  void issue_to_self() {
    if (to_self.empty()) return;
    const InCall call(*this, to_self.back().send ? "send" : "recv");
    after_compute(stream);
    TRIDENT_NCCL(ncclGroupStart());
    for (const SelfTransfer& t : to_self) {
      if (t.send)
        TRIDENT_NCCL(ncclSend(t.data, size_t(t.count), dtype_of(t.dtype), rank, comm, stream));
      else
        TRIDENT_NCCL(ncclRecv(t.data, size_t(t.count), dtype_of(t.dtype), rank, comm, stream));
    }
    TRIDENT_NCCL(ncclGroupEnd());
    for (const SelfTransfer& t : to_self) issued(t.slot, stream);
    to_self.clear();
  }
  // A collective: held transfers go first (every rank issues the same order).
  template <class F> int collective(const char* operation, F enqueue) {
    std::lock_guard lock(mutex);
    issue_to_self();
    const int slot = take(operation, -1);
    const InCall call(*this, operation);
    after_compute(stream);
    TRIDENT_NCCL(enqueue());
    issued(slot, stream);
    return slot;
  }
  // To or from another rank: at once, alone, on that peer's channel for this direction. With one
  // stream for all of them a pipeline would deadlock (a send blocks its stream until the partner's
  // receive runs; tests/comm/test_pipeline_on_nccl.cpp simulates why and that channels do not).
  int point_to_point(bool send, void* data, int64_t n, int dtype, int peer) {
    std::lock_guard lock(mutex);
    const int slot = take(send ? "send" : "recv", peer);
    if (peer == rank) {
      to_self.push_back(SelfTransfer{send, slot, data, n, dtype});
      if (send) issue_to_self();
      return slot;
    }
    auto& channels = send ? to : from;
    const auto it = channels.find(peer);
    TRIDENT_CHECK(it != channels.end(),
                  "{} group rank {} on group '{}' over NCCL: point-to-point goes between neighbouring ranks of "
                  "the pipeline group only (its channels are made when the mesh is connected)",
                  send ? "send to" : "receive from", peer, owner.name());
    const Channel& c = it->second;
    const InCall call(*this, send ? "send" : "recv");
    after_compute(c.stream);
    if (send)
      TRIDENT_NCCL(ncclSend(data, size_t(n), dtype_of(dtype), c.peer, c.comm, c.stream));
    else
      TRIDENT_NCCL(ncclRecv(data, size_t(n), dtype_of(dtype), c.peer, c.comm, c.stream));
    issued(slot, c.stream);
    return slot;
  }
  // The channels to and from the ring neighbours (group ranks r - 1 and r + 1): for each pair {k, k+1}
  // and each direction a 2-rank communicator split off the group's, in the same order on every rank.
  // Each is connected at once: NCCL connects a peer at its first send or receive, and that call blocks
  // the host until the peer makes its own first call on the connection; a pipeline posts a receive
  // before it sends, so both ranks of a pair would block in their receive for ever (found on gpu-sim,
  // tests/gpu/test_gpu_comm.cpp at 2 ranks). Connected here, in this fixed order, no later call blocks.
  void make_channels(int size) {
    const int pairs = size == 1 ? 0 : size == 2 ? 1 : size;
    for (int k = 0; k < pairs; ++k) {
      const int a = k, b = (k + 1) % size;
      for (const auto& [sender, receiver] : {std::pair{a, b}, std::pair{b, a}}) {
        const bool member = rank == sender || rank == receiver;
        Channel c;
        TRIDENT_NCCL(ncclCommSplit(comm, member ? 0 : NCCL_SPLIT_NOCOLOR, rank, &c.comm, nullptr));
        if (!member) continue;
        TRIDENT_CUDA(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
        const int other = rank == sender ? receiver : sender;
        c.peer = other < rank ? 0 : 1;  // the split orders by group rank
        connect(c, rank == sender);
        (rank == sender ? to : from)[other] = c;
      }
    }
  }
  // One float over the channel, waited for: NCCL sets up the connection on the way.
  static void connect(const Channel& c, bool send) {
    float* one = nullptr;
    TRIDENT_CUDA(cudaMalloc(&one, sizeof(float)));
    TRIDENT_CUDA(cudaMemsetAsync(one, 0, sizeof(float), c.stream));
    if (send)
      TRIDENT_NCCL(ncclSend(one, 1, ncclFloat32, c.peer, c.comm, c.stream));
    else
      TRIDENT_NCCL(ncclRecv(one, 1, ncclFloat32, c.peer, c.comm, c.stream));
    TRIDENT_CUDA(cudaStreamSynchronize(c.stream));
    TRIDENT_CUDA(cudaFree(one));
  }
  std::vector<ncclComm_t> all_comms() const {
    std::vector<ncclComm_t> all = {comm};
    for (const auto* channels : {&to, &from})
      for (const auto& [peer, c] : *channels) all.push_back(c.comm);
    return all;
  }

  // ---- watchdog::DeviceWork (monitor thread) ----
  std::optional<watchdog::Activity> oldest_unfinished() override {
    std::optional<watchdog::Activity> oldest;
    if (const double since = in_call_since; since > 0) oldest = watchdog::Activity{in_call, &owner, -1, 0, since};
    std::unique_lock lock(mutex, std::try_to_lock);
    if (!lock.owns_lock()) return oldest;  // the caller is inside NCCL: in_call covers it
    cudaSetDevice(device);
    for (const Slot& s : slots) {
      if (!s.issued || completed(s)) continue;
      if (!oldest || s.start_s < oldest->start_s)
        oldest = watchdog::Activity{s.operation, &owner, s.peer, 0, s.start_s};
    }
    return oldest;
  }
  std::string async_error() override {
    for (ncclComm_t c : all_comms()) {
      ncclResult_t async = ncclSuccess;
      if (ncclCommGetAsyncError(c, &async) != ncclSuccess || async == ncclSuccess || async == ncclInProgress) continue;
      return fmt::format("NCCL error on group '{}': {}", owner.name(), ncclGetErrorString(async));
    }
    return {};
  }
  void abort() override {
    for (ncclComm_t c : all_comms()) ncclCommAbort(c);
  }
};

class CudaNcclComm final : public NcclComm {
 public:
  CudaNcclComm(MPI_Comm comm, void* compute_stream, const Group& owner, bool point_to_point);
  ~CudaNcclComm() override;
  int all_reduce(void* data, int64_t n, int dtype, ReduceOp op) override;
  int reduce_scatter(const void* send, void* recv, int64_t recv_count, int dtype) override;
  int all_gather(const void* send, void* recv, int64_t send_count, int dtype) override;
  int broadcast(void* data, int64_t n, int dtype, int root) override;
  int reduce(void* data, int64_t n, int dtype, int root) override;
  int send(const void* data, int64_t n, int dtype, int peer) override;
  int recv(void* data, int64_t n, int dtype, int peer) override;
  void wait(int slot) override;
  bool done(int slot) override;

 private:
  std::unique_ptr<NcclState> impl_;
};

CudaNcclComm::CudaNcclComm(MPI_Comm comm, void* compute_stream, const Group& owner, bool point_to_point)
    : impl_(std::make_unique<NcclState>(owner, static_cast<cudaStream_t>(compute_stream))) {
  TRIDENT_CHECK(compute_stream != nullptr, "internal: NCCL for group '{}' without the CUDA compute stream",
                owner.name());
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  ncclUniqueId id;
  if (rank == 0) TRIDENT_NCCL(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm);
  TRIDENT_CUDA(cudaGetDevice(&impl_->device));
  TRIDENT_CUDA(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking));
  TRIDENT_CUDA(cudaEventCreateWithFlags(&impl_->ready, cudaEventDisableTiming));
  TRIDENT_NCCL(ncclCommInitRank(&impl_->comm, size, id, rank));
  impl_->rank = rank;
  if (point_to_point) impl_->make_channels(size);
  watchdog::add_device_work(impl_.get());
}

CudaNcclComm::~CudaNcclComm() {
  watchdog::remove_device_work(impl_.get());
  NcclState& m = *impl_;
  if (m.comm) {
    try {
      m.issue_to_self();
    } catch (const Error&) {
    }
    cudaStreamSynchronize(m.stream);
    for (auto* channels : {&m.to, &m.from})
      for (auto& [peer, c] : *channels) {
        cudaStreamSynchronize(c.stream);
        ncclCommDestroy(c.comm);
        cudaStreamDestroy(c.stream);
      }
    ncclCommDestroy(m.comm);
  }
  for (auto& s : m.slots) cudaEventDestroy(s.done);
  if (m.ready) cudaEventDestroy(m.ready);
  if (m.stream) cudaStreamDestroy(m.stream);
}

int CudaNcclComm::all_reduce(void* data, int64_t n, int dtype, ReduceOp op) {
  NcclState& m = *impl_;
  return m.collective("all_reduce", [&] {
    return ncclAllReduce(data, data, size_t(n), dtype_of(dtype), op == ReduceOp::Sum ? ncclSum : ncclMax, m.comm,
                         m.stream);
  });
}
int CudaNcclComm::reduce_scatter(const void* send, void* recv, int64_t recv_count, int dtype) {
  NcclState& m = *impl_;
  return m.collective("reduce_scatter", [&] {
    return ncclReduceScatter(send, recv, size_t(recv_count), dtype_of(dtype), ncclSum, m.comm, m.stream);
  });
}
int CudaNcclComm::all_gather(const void* send, void* recv, int64_t send_count, int dtype) {
  NcclState& m = *impl_;
  return m.collective("all_gather",
                      [&] { return ncclAllGather(send, recv, size_t(send_count), dtype_of(dtype), m.comm, m.stream); });
}
int CudaNcclComm::broadcast(void* data, int64_t n, int dtype, int root) {
  NcclState& m = *impl_;
  return m.collective("broadcast",
                      [&] { return ncclBroadcast(data, data, size_t(n), dtype_of(dtype), root, m.comm, m.stream); });
}
int CudaNcclComm::reduce(void* data, int64_t n, int dtype, int root) {
  NcclState& m = *impl_;
  return m.collective("reduce",
                      [&] { return ncclReduce(data, data, size_t(n), dtype_of(dtype), ncclSum, root, m.comm, m.stream); });
}
int CudaNcclComm::send(const void* data, int64_t n, int dtype, int peer) {
  return impl_->point_to_point(true, const_cast<void*>(data), n, dtype, peer);
}
int CudaNcclComm::recv(void* data, int64_t n, int dtype, int peer) {
  return impl_->point_to_point(false, data, n, dtype, peer);
}

void CudaNcclComm::wait(int slot) {
  NcclState& m = *impl_;
  std::lock_guard lock(m.mutex);
  if (!m.slots.at(size_t(slot)).issued) m.issue_to_self();
  NcclState::Slot& s = m.slots.at(size_t(slot));
  TRIDENT_CUDA(cudaStreamWaitEvent(m.compute, s.done, 0));
  s.busy = false;
}

bool CudaNcclComm::done(int slot) {
  NcclState& m = *impl_;
  std::lock_guard lock(m.mutex);
  if (!m.slots.at(size_t(slot)).issued) m.issue_to_self();
  return m.completed(m.slots.at(size_t(slot)));
}

}  // namespace

std::unique_ptr<NcclComm> make_nccl(MPI_Comm comm, void* compute_stream, const Group& owner, bool point_to_point) {
  return std::make_unique<CudaNcclComm>(comm, compute_stream, owner, point_to_point);
}

}  // namespace trident::cuda
