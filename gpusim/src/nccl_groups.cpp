// gpu-sim's NCCL: point-to-point, groups, and how every operation runs on its stream.
//
// ncclGroupStart/End nest per host thread; the outermost End issues what the group collected (a call
// outside a group is a group of one). Issuing first connects the new point-to-point connections on the
// host, as NCCL connects lazily: a send to peer P that is this rank's first to P blocks the calling
// thread until P has made its first receive from this rank (and the reverse), all new connections of
// a group at once, so {send to P, receive from P} in one group on both ranks connects. Then the tasks
// of each stream become one piece of stream work that runs when its stream gets there, and, for each
// of its communicators, when the pieces issued before it on that communicator have ended. It checks
// that every buffer is device memory (a host pointer faults the device, as an NCCL kernel would),
// posts all its MPI requests, sends as MPI_Issend (a send completes only once its receive has started,
// so two ranks that both send first, each alone on its stream, deadlock as in NCCL; a send to this
// rank itself completes only with its receive in the same group), and polls them until all are done.
#include <algorithm>
#include <cstring>
#include <sstream>

#include "gpusim/runtime.hpp"
#include "gpusim/runtime_api.h"
#include "nccl_internal.hpp"

namespace gpusim::nccl {
namespace {

thread_local int t_depth = 0;                           // open ncclGroupStart calls
thread_local std::vector<Task> t_tasks;                 // collected by the open group
thread_local ncclResult_t t_group_error = ncclSuccess;  // the first call of the open group that failed

// Assigns tickets and queues pieces as one step, so that every communicator's tickets follow one
// process-wide issue order (two threads issuing at once could otherwise cross and deadlock).
std::mutex g_issue_lock;

bool is_p2p(const Task& t) { return t.kind == Kind::Send || t.kind == Kind::Recv; }

// ---- connection set-up ----
struct Connection {
  ncclComm* comm;
  int peer;
  bool send;
  bool operator==(const Connection& o) const { return comm == o.comm && peer == o.peer && send == o.send; }
};

std::vector<Connection> new_connections(const std::vector<Task>& tasks) {
  std::vector<Connection> found;
  for (const Task& t : tasks) {
    if (!is_p2p(t) || t.peer == t.comm->rank) continue;  // a rank reaches itself without a handshake
    const Connection c{t.comm.get(), t.peer, t.kind == Kind::Send};
    std::lock_guard guard(c.comm->lock);
    if (!c.comm->connected.count({c.peer, c.send}) && std::find(found.begin(), found.end(), c) == found.end())
      found.push_back(c);
  }
  return found;
}

// The handshakes of the new connections, all at once: each side says hello and waits for the other's.
ncclResult_t connect(const std::vector<Task>& tasks) {
  const std::vector<Connection> todo = new_connections(tasks);
  if (todo.empty()) return ncclSuccess;
  std::vector<MPI_Request> requests(2 * todo.size());
  std::vector<ncclComm*> comms;
  for (size_t i = 0; i < todo.size(); ++i) {
    const Connection& c = todo[i];
    const int mine = c.send ? kHelloFromSender : kHelloFromReceiver;
    const int theirs = c.send ? kHelloFromReceiver : kHelloFromSender;
    MPI_Isend(nullptr, 0, MPI_BYTE, c.peer, mine, c.comm->control, &requests[2 * i]);
    MPI_Irecv(nullptr, 0, MPI_BYTE, c.peer, theirs, c.comm->control, &requests[2 * i + 1]);
    comms.push_back(c.comm);
  }
  const char* call = tasks.size() == 1 ? tasks.front().name : "ncclGroupEnd";
  if (const ncclResult_t r = wait_all(requests, nullptr, comms, std::string(call) + " (connecting)");
      r != ncclSuccess) {
    abandon(std::move(requests), nullptr);
    return fail(r, std::string(call) + ": while connecting to a peer: " + interruption_text(r));
  }
  for (const Connection& c : todo) {
    std::lock_guard guard(c.comm->lock);
    c.comm->connected.insert({c.peer, c.send});
  }
  return ncclSuccess;
}

// ---- pieces: the tasks of one stream in one group ----
struct Turn {
  CommPtr comm;
  uint64_t ticket;
};

class Piece {
 public:
  explicit Piece(std::vector<Task> tasks) : tasks_(std::move(tasks)) {}
  // Ends the piece's turn on each communicator, whether it ran or was dropped (a faulted device skips
  // queued work; an enqueue that failed drops it).
  ~Piece() {
    for (const Turn& t : turns_) end_turn(*t.comm, t.ticket);
  }
  Piece(const Piece&) = delete;
  Piece& operator=(const Piece&) = delete;

  // Called with the issue lock held.
  void take_turns() {
    for (const Task& t : tasks_) {
      if (std::any_of(turns_.begin(), turns_.end(), [&](const Turn& u) { return u.comm == t.comm; })) continue;
      turns_.push_back(Turn{t.comm, t.comm->tickets++});
      std::lock_guard guard(t.comm->lock);
      ++t.comm->queued;
    }
  }
  const char* name() const { return tasks_.size() == 1 ? tasks_.front().name : "ncclGroupEnd"; }
  void run();

 private:
  static void end_turn(ncclComm& c, uint64_t ticket);
  bool buffers_accessible() const;
  bool wait_for_turns() const;
  void fail_all(ncclResult_t why) const;
  ncclResult_t post(std::vector<Staged>& staged, std::vector<MPI_Request>& requests) const;

  std::vector<Task> tasks_;
  std::vector<Turn> turns_;
};

void Piece::end_turn(ncclComm& c, uint64_t ticket) {
  {
    std::lock_guard guard(c.lock);
    c.ended.insert(ticket);
    while (c.ended.erase(c.turn)) ++c.turn;
    --c.queued;
  }
  c.changed.notify_all();
}

// The byte ranges a task reads and writes: (pointer, bytes).
std::vector<std::pair<const void*, size_t>> ranges(const Task& t) {
  const size_t bytes = t.count * type_size(t.type);
  switch (t.kind) {
    case Kind::Send:
      return {{t.send, bytes}};
    case Kind::Recv:
      return {{t.recv, bytes}};
    default: {
      const auto [in, out] = collective_extent(t);
      return {{t.send, in}, {t.recv, out}};
    }
  }
}

bool Piece::buffers_accessible() const {
  for (const Task& t : tasks_)
    for (const auto& [p, bytes] : ranges(t)) {
      if (bytes == 0 || device_accessible(p, bytes)) continue;
      std::ostringstream what;
      what << t.name << " on rank " << t.comm->rank << " of " << t.comm->size << ": buffer " << p << " (" << bytes
           << " bytes) is not device memory";
      device_fault(cudaErrorIllegalAddress, what.str());
      return false;
    }
  return true;
}

bool Piece::wait_for_turns() const {
  for (const Turn& t : turns_) {
    ncclComm& c = *t.comm;
    std::unique_lock guard(c.lock);
    c.changed.wait(guard, [&] { return c.turn == t.ticket || c.aborted; });
    if (c.aborted) return false;
  }
  return true;
}

void Piece::fail_all(ncclResult_t why) const {
  for (const Turn& t : turns_) set_async_error(*t.comm, why);
}

ncclResult_t Piece::post(std::vector<Staged>& staged, std::vector<MPI_Request>& requests) const {
  for (size_t i = 0; i < tasks_.size(); ++i) {
    const Task& t = tasks_[i];
    Staged& s = staged[i];
    const int bytes = int(t.count * type_size(t.type));
    int rc = MPI_SUCCESS;
    if (t.kind == Kind::Send) {
      s.in.assign(static_cast<const char*>(t.send), static_cast<const char*>(t.send) + bytes);
      rc = MPI_Issend(s.in.data(), bytes, MPI_BYTE, t.peer, kTransferTag, t.comm->ops, &requests[i]);
    } else if (t.kind == Kind::Recv) {
      s.out.resize(size_t(bytes));
      rc = MPI_Irecv(s.out.data(), bytes, MPI_BYTE, t.peer, kTransferTag, t.comm->ops, &requests[i]);
    } else {
      rc = post_collective(t, s, &requests[i]);
    }
    if (rc != MPI_SUCCESS) return fail(ncclSystemError, std::string(t.name) + ": MPI error: " + mpi_error_text(rc));
  }
  return ncclSuccess;
}

void Piece::run() {
  if (!buffers_accessible() || !wait_for_turns()) return;
  std::vector<ncclComm*> comms;
  for (const Turn& t : turns_) {
    if (interruption(*t.comm) != ncclSuccess) return;  // failed or aborted: nothing more runs on it
    comms.push_back(t.comm.get());
  }
  auto staged = std::make_shared<std::vector<Staged>>(tasks_.size());
  std::vector<MPI_Request> requests(tasks_.size(), MPI_REQUEST_NULL);
  std::vector<MPI_Status> statuses(tasks_.size());
  ncclResult_t r = post(*staged, requests);
  if (r == ncclSuccess) r = wait_all(requests, statuses.data(), comms, name());
  if (r != ncclSuccess) {
    fail_all(r);
    abandon(std::move(requests), staged);
    return;
  }
  for (size_t i = 0; i < tasks_.size(); ++i) {
    const Task& t = tasks_[i];
    if (t.kind == Kind::Recv) {
      int received = 0;
      MPI_Get_count(&statuses[i], MPI_BYTE, &received);
      if (received > 0) std::memcpy(t.recv, (*staged)[i].out.data(), size_t(received));
    } else if (t.kind != Kind::Send) {
      finish_collective(t, (*staged)[i]);
    }
  }
}

// ---- issuing ----
// The tasks by stream, in issue order within each.
std::vector<std::vector<Task>> by_stream(std::vector<Task> tasks) {
  std::vector<std::vector<Task>> pieces;
  for (Task& t : tasks) {
    auto it = std::find_if(pieces.begin(), pieces.end(), [&](const auto& p) { return p.front().stream == t.stream; });
    if (it == pieces.end()) it = pieces.insert(pieces.end(), std::vector<Task>{});
    it->push_back(std::move(t));
  }
  return pieces;
}

ncclResult_t issue(std::vector<Task> tasks) {
  if (const ncclResult_t r = connect(tasks); r != ncclSuccess) return r;
  std::lock_guard guard(g_issue_lock);
  for (std::vector<Task>& group : by_stream(std::move(tasks))) {
    const cudaStream_t stream = group.front().stream;
    auto piece = std::make_shared<Piece>(std::move(group));
    piece->take_turns();
    const char* name = piece->name();
    if (const cudaError_t e = enqueue(stream, name, [piece] { piece->run(); }); e != cudaSuccess)
      return fail(ncclUnhandledCudaError, std::string(name) + ": the stream refused the work: " + cudaGetErrorName(e));
  }
  return ncclSuccess;
}

// Ends the open group (or the implicit one of a call outside a group): issues what it collected, or
// drops it all if one of its calls failed.
ncclResult_t flush() {
  std::vector<Task> tasks = std::exchange(t_tasks, {});
  const ncclResult_t error = std::exchange(t_group_error, ncclSuccess);
  if (error != ncclSuccess) return error;
  return tasks.empty() ? ncclSuccess : issue(std::move(tasks));
}

// A send or receive: checked, then handed to the group.
ncclResult_t point_to_point(Kind kind, const char* call, const void* send, void* recv, size_t count,
                            ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream) {
  CommPtr c;
  ncclResult_t r = check_task(call, comm, count, type, true, &c);
  if (r == ncclSuccess && (peer < 0 || peer >= c->size))
    r = fail(ncclInvalidArgument, std::string(call) + ": peer " + std::to_string(peer) + " of a communicator of " +
                                      std::to_string(c->size) + " ranks");
  if (r != ncclSuccess) return reject(r);
  return submit(Task{kind, call, std::move(c), stream, send, recv, count, type, ncclSum, peer});
}

}  // namespace

bool in_group() { return t_depth > 0; }

ncclResult_t reject(ncclResult_t r) {
  if (t_depth > 0 && t_group_error == ncclSuccess) t_group_error = r;
  return r;
}

ncclResult_t submit(Task task) {
  t_tasks.push_back(std::move(task));
  return t_depth > 0 ? ncclSuccess : flush();
}

}  // namespace gpusim::nccl

using namespace gpusim::nccl;

extern "C" {

ncclResult_t ncclGroupStart(void) {
  ++t_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  if (t_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  return --t_depth > 0 ? ncclSuccess : flush();
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return point_to_point(Kind::Send, "ncclSend", sendbuff, nullptr, count, datatype, peer, comm, stream);
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return point_to_point(Kind::Recv, "ncclRecv", nullptr, recvbuff, count, datatype, peer, comm, stream);
}

}  // extern "C"
