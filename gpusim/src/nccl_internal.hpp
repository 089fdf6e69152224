#pragma once
// gpu-sim's NCCL over MPI: what its three parts share (communicator set-up: nccl_setup.cpp;
// collectives: nccl_collectives.cpp; point-to-point, groups and running on streams: nccl_groups.cpp).
//
// Model. A communicator is an ordered set of MPI processes, one NCCL rank each, with two private MPI
// communicators ordered by NCCL rank: `ops`, used only by operations running on stream workers, and
// `control`, used by host calls (split, connection handshakes, abort notices), so that a host call
// and a stream worker never race on one MPI communicator. Every NCCL call is a task; outside a group
// it is issued at once, inside one at the outermost ncclGroupEnd, where the tasks of each stream become
// one piece of stream work (gpusim::enqueue) that posts all its MPI requests and then waits for all of
// them. Pieces of one communicator run one at a time in issue order, even from different streams (a
// ticket per piece and communicator), so a group that puts one communicator's calls on two streams
// runs them stream by stream: unlike NCCL, which joins the streams, a send and its receive on two
// streams of one group deadlock here. Every wait polls (MPI_Test + gpusim::poll_pause) and watches the
// communicator's abort flag and the peers' abort notices, so a stalled peer never burns a core and
// ncclCommAbort always releases the waiter. Sends are synchronous (MPI_Issend): like NCCL's, one
// completes only once its receive has started. A peer's first send or receive in each direction
// connects on the host first (a handshake on `control`), as NCCL connects lazily.
//
// Data are staged: a piece copies its inputs into buffers of its own when it starts and copies results
// out when every request has completed, so in-place calls need no MPI_IN_PLACE and a request abandoned
// by an abort never writes user memory (its buffers are kept for the rest of the process).
#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "nccl.h"

struct ncclComm {
  MPI_Comm ops = MPI_COMM_NULL;      // stream work only (pieces hold the communicator's turn)
  MPI_Comm control = MPI_COMM_NULL;  // host calls; stream work only probes it for abort notices
  int rank = 0;
  int size = 1;
  int device = 0;
  std::atomic<bool> aborted{false};           // ncclCommAbort was called here
  std::atomic<int> async_error{ncclSuccess};  // the first failure of an operation, or a peer's abort
  uint64_t tickets = 0;                       // pieces issued so far (guarded by the issue lock, nccl_groups.cpp)

  std::mutex lock;                           // guards what follows; never held while calling MPI or the CUDA runtime
  std::condition_variable changed;           // a turn passed, a piece ended, or the communicator was aborted
  uint64_t turn = 0;                         // the ticket whose piece may run now
  std::set<uint64_t> ended;                  // tickets of ended pieces; the turn passes over them in order
  int queued = 0;                            // pieces issued and not ended
  std::set<std::pair<int, bool>> connected;  // (peer, this rank sends) connections made
};

namespace gpusim::nccl {

// Reserved MPI tags. On MPI_COMM_WORLD (ncclCommInitRank's rendezvous): kJoinTag, kReplyTag, and
// from kCreateTagBase up to MPI_TAG_UB the tags of MPI_Comm_create_group (one picked from the id's
// nonce, so that concurrent ncclCommInitRank calls in one process use different ones). On a
// communicator's `control`: the rest. On `ops`, point-to-point transfers use kTransferTag (NCCL pairs
// sends and receives by order only).
constexpr int kJoinTag = 30000;
constexpr int kReplyTag = 30001;
constexpr int kCreateTagBase = 30002;
constexpr int kSplitTag = 1;
constexpr int kHelloFromSender = 2;
constexpr int kHelloFromReceiver = 3;
constexpr int kAbortNotice = 4;
constexpr int kTransferTag = 0;

using CommPtr = std::shared_ptr<ncclComm>;

// Prints "gpu-sim NCCL: <message>" to stderr, makes it the thread's ncclGetLastError and returns code.
ncclResult_t fail(ncclResult_t code, const std::string& message);
// MPI's text for an error code.
std::string mpi_error_text(int code);

// MPI is initialised with MPI_THREAD_MULTIPLE (stream workers call MPI); else fails with a message.
ncclResult_t check_mpi(const char* call);

// The live communicator behind a handle; null (after printing why) for one never made, destroyed or
// aborted.
CommPtr find_comm(ncclComm_t handle, const char* call);

// Records the first asynchronous error of c (later ones are consequences).
void set_async_error(ncclComm& c, ncclResult_t error);
// ncclSuccess while c may go on; else why not: ncclInternalError once aborted here, ncclRemoteError
// once a peer's abort notice has arrived (looked for on c.control), or the operation error recorded.
ncclResult_t interruption(ncclComm& c);

// Polls the requests until all have completed (ncclSuccess), one of the communicators is interrupted
// (its code) or MPI reports an error (ncclSystemError, printed with `what`). statuses may be null.
ncclResult_t wait_all(std::vector<MPI_Request>& requests, MPI_Status* statuses, const std::vector<ncclComm*>& comms,
                      const std::string& what);

// Keeps the requests (not completed: an abort cut their wait short) and what holds their buffers for
// the rest of the process, so that MPI may still use them.
void abandon(std::vector<MPI_Request> requests, std::shared_ptr<const void> buffers);
// Why a blocked call gave up, for its message (`why` from interruption).
const char* interruption_text(ncclResult_t why);

// ---- tasks: one NCCL call each ----
enum class Kind { AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, Send, Recv };

struct Task {
  Kind kind;
  const char* name;  // the NCCL call, for messages
  CommPtr comm;
  cudaStream_t stream;
  const void* send;
  void* recv;
  size_t count;  // elements; per rank for all-gather (sendcount) and reduce-scatter (recvcount)
  ncclDataType_t type;
  ncclRedOp_t op;
  int peer;  // the root of a broadcast or reduce, the peer of a send or receive
};

// A task's staged data while its piece runs.
struct Staged {
  std::vector<char> in, out;
};

// Bytes per element of the implemented types; 0 for the others.
size_t type_size(ncclDataType_t type);
// Checks what every operation shares: the communicator, the type (implemented ones only), the
// count (what one MPI call can carry: at most INT_MAX elements, or bytes for point-to-point).
ncclResult_t check_task(const char* call, ncclComm_t handle, size_t count, ncclDataType_t type, bool bytes,
                        CommPtr* comm);

// A group is open on the calling thread (ncclGroupStart without its ncclGroupEnd yet).
bool in_group();
// A call's argument error: inside a group it also fails the group (ncclGroupEnd drops the group's
// calls and returns it). Returns r.
ncclResult_t reject(ncclResult_t r);
// Hands a checked task to the calling thread's group (issued at once outside a group).
ncclResult_t submit(Task task);

// Collectives (nccl_collectives.cpp), for a running piece: the byte ranges the task reads (first) and
// writes, posting its MPI request, and copying its result out once the request has completed.
std::pair<size_t, size_t> collective_extent(const Task& t);
int post_collective(const Task& t, Staged& s, MPI_Request* request);
void finish_collective(const Task& t, Staged& s);

}  // namespace gpusim::nccl
