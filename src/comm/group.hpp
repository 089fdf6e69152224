#pragma once
// A communicator group (TP, PP, DP, world, ...) and the collectives every parallel scheme uses.
//
// Two kinds of buffer travel through a group. Tensors live in the compute backend's memory (model
// activations, gradients, parameters: host memory on the cpu backend, GPU memory on cuda); how they
// travel is the group's TensorTransport, chosen once when the mesh is connected to its backend
// (ParallelMesh::connect_tensors), never by looking at a pointer. Host values (losses, norms, flags,
// topology) go over MPI always, through the *_host calls. Every operation counts the bytes it moves
// (see CommCounters), so tests and benchmarks can compare measured against analytic volume.
#include <mpi.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/config.hpp"

namespace trident {

enum class ReduceOp { Sum, Max };

// How a group moves tensors (runtime.comm, with the backend):
//   Host    the cpu backend: tensors are host memory and go over MPI as they are;
//   Nccl    GPU tensors over NCCL, on a communication stream ordered against the compute stream by
//           events (comm/nccl.hpp); a group of one rank still goes through NCCL;
//   Staged  GPU tensors copied through page-locked host memory and moved over MPI (comm/staging.hpp),
//           so several ranks may share one GPU.
enum class TensorTransport { Host, Nccl, Staged };
const char* to_string(TensorTransport t);

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
  int transfer = -1;           // Staged: the staging slot; Nccl: the completion event's slot
};

class NcclComm;      // comm/nccl.hpp
class HostStaging;   // comm/staging.hpp
class DeviceCopies;  // comm/staging.hpp

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

  // ---- tensors: contiguous buffers in the compute backend's memory, of float, double, int32_t or int64_t ----
  // Blocking calls return with the result usable by the compute backend's later work (on a GPU: ordered
  // on its stream, not necessarily arrived on the host).
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
  bool test(Request& r);  // true when complete (the request is then finished and reset)

  // ---- host values: always MPI, whatever the transport ----
  template <class T> void all_reduce_host(T* data, int64_t n, ReduceOp op = ReduceOp::Sum);
  template <class T> void all_gather_host(const T* send, T* recv, int64_t send_count);
  template <class T> void broadcast_host(T* data, int64_t n, int root);
  // Every rank's text, in group-rank order, on group rank 0 (empty elsewhere): logs, traces.
  std::vector<std::string> gather_strings_host(const std::string& mine);
  void barrier();

  const CommCounters& counters() const { return counters_; }
  void reset_counters() { counters_ = CommCounters{}; }

  // The tensor transport, set once (before any tensor operation). Nccl needs a CUDA build and the
  // compute stream (a cudaStream_t), and makes point-to-point channels to the neighbouring ranks when
  // asked (the pipeline group); Staged takes the copies between device and page-locked host memory.
  void use_nccl(void* compute_stream, bool point_to_point = false);
  void use_staging(std::unique_ptr<DeviceCopies> copies);
  TensorTransport transport() const { return transport_; }

 private:
  // Waits for r under the watchdog (comm/watchdog.hpp): operation and peer name it if it never completes.
  void wait_mpi(MPI_Request* r, const char* operation, int peer = -1);
  // The buffer MPI works on for a tensor: the tensor itself (Host), or a staging slot holding a copy of
  // `in` (when given) that goes back to `out` (when given) once the request finishes (Staged).
  template <class T> T* mpi_side(const T* in, T* out, int64_t n, Request& r);
  void finish(Request& r);  // after the MPI part is complete: the staged copy back, the slot freed
  template <class T> void mpi_all_reduce(T* data, int64_t n, ReduceOp op);
  template <class T> void mpi_all_gather(const T* send, T* recv, int64_t send_count);
  template <class T> void mpi_broadcast(T* data, int64_t n, int root);

  std::string name_;
  MPI_Comm comm_;
  std::vector<int> world_ranks_;
  MpiWait wait_;
  int rank_ = 0, size_ = 1;
  CommCounters counters_;
  TensorTransport transport_ = TensorTransport::Host;
  std::unique_ptr<NcclComm> nccl_;
  std::unique_ptr<HostStaging> staging_;
};

}  // namespace trident
