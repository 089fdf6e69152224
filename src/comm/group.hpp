#pragma once
// A communicator group (TP, PP, DP, world, ...) and the collectives every parallel scheme uses.
// Host buffers go over MPI; in a CUDA build whose group has an NCCL communicator attached, device
// buffers go over NCCL. Every operation counts the bytes it moves (see CommCounters), so tests and
// benchmarks can compare measured against analytic communication volume.
#include <mpi.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/config.hpp"

namespace trident {

enum class ReduceOp { Sum, Max };

enum class CommOp { AllReduce, ReduceScatter, AllGather, Broadcast, Send, Recv, Reduce, kCount };
const char* to_string(CommOp op);

// Logical payload bytes per operation kind, as seen by this rank (groups of one rank move nothing): all-reduce n elements counts n,
// reduce-scatter counts the full input, all-gather the full output, reduce and broadcast the buffer, send/recv the message.
struct CommCounters {
  std::array<int64_t, static_cast<size_t>(CommOp::kCount)> bytes{};
  std::array<int64_t, static_cast<size_t>(CommOp::kCount)> calls{};
  double seconds = 0;  // wall time spent inside blocking operations and waits of this group
  int64_t total_bytes() const;
  int64_t bytes_of(CommOp op) const { return bytes[static_cast<size_t>(op)]; }
  void add(CommOp op, int64_t b) {
    bytes[static_cast<size_t>(op)] += b;
    calls[static_cast<size_t>(op)] += 1;
  }
};

// An outstanding non-blocking operation; wait on it through its group.
struct Request {
  MPI_Request mpi = MPI_REQUEST_NULL;
  const char* operation = "";  // for the watchdog's message: "all_reduce", "send", ...
  int peer = -1;               // group rank of a send/recv partner; -1 for a collective
};

class NcclComm;  // comm/nccl.hpp, CUDA builds only

class Group {
 public:
  // Takes ownership of `comm`. `world_ranks` lists the members' world ranks in group-rank order.
  Group(std::string name, MPI_Comm comm, std::vector<int> world_ranks, MpiWait wait);
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  const std::string& name() const { return name_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm mpi_comm() const { return comm_; }
  const std::vector<int>& world_ranks() const { return world_ranks_; }

  // Collectives on contiguous buffers of float, double, int32_t or int64_t.
  template <class T> void all_reduce(T* data, int64_t n, ReduceOp op = ReduceOp::Sum);
  // send holds size()*recv_count elements; rank r receives the sum of block r.
  template <class T> void reduce_scatter(const T* send, T* recv, int64_t recv_count);
  // recv receives size()*send_count elements, block r from rank r.
  template <class T> void all_gather(const T* send, T* recv, int64_t send_count);
  template <class T> void broadcast(T* data, int64_t n, int root);
  template <class T> void send(const T* data, int64_t n, int dest, int tag = 0);
  template <class T> void recv(T* data, int64_t n, int source, int tag = 0);
  template <class T> Request isend(const T* data, int64_t n, int dest, int tag = 0);
  template <class T> Request irecv(T* data, int64_t n, int source, int tag = 0);
  template <class T> Request iall_reduce(T* data, int64_t n, ReduceOp op = ReduceOp::Sum);
  // Sum of every rank's data[0, n) into root's data (in place there; the others' data is only read).
  // ZeRO-2 reduces each gradient segment to the rank that owns it.
  template <class T> Request ireduce(T* data, int64_t n, int root);
  // Root's data[0, n) to every rank, in place (ZeRO sends each updated shard from its owner).
  template <class T> Request ibroadcast(T* data, int64_t n, int root);
  void wait(Request& r);
  void wait_all(std::vector<Request>& rs);
  bool test(Request& r);  // true when complete (the request is then reset)
  void barrier();

  const CommCounters& counters() const { return counters_; }
  void reset_counters() { counters_ = CommCounters{}; }

  // Mirrors this group with an NCCL communicator (CUDA builds with a GPU; a clear error otherwise).
  void attach_nccl();
  bool has_nccl() const { return nccl_ != nullptr; }

 private:
  // Waits for r under the watchdog (comm/watchdog.hpp): operation and peer name it if it never completes.
  void wait_mpi(MPI_Request* r, const char* operation, int peer = -1);
  template <class T> bool on_device(const T* p) const;

  std::string name_;
  MPI_Comm comm_;
  std::vector<int> world_ranks_;
  MpiWait wait_;
  int rank_ = 0, size_ = 1;
  CommCounters counters_;
  std::unique_ptr<NcclComm> nccl_;
};

}  // namespace trident
