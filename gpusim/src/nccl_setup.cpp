// gpu-sim's NCCL: communicators. ncclCommInitRank is a rendezvous over MPI_COMM_WORLD run by the
// process that made the id (ncclGetUniqueId): every member sends it a join, it checks them and
// answers each with the members' MPI ranks in NCCL rank order, and the members make the
// communicator's own MPI communicators with MPI_Comm_create_group. The creator must be a member
// (NCCL runs the rendezvous in a thread of its own, so there it need not be). ncclCommSplit gathers
// colours and keys over the parent's control communicator, then the members of each colour make theirs.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <random>

#include "gpusim/runtime.hpp"
#include "gpusim/runtime_api.h"
#include "nccl_internal.hpp"

namespace gpusim::nccl {
namespace {

// ---- handles ----
std::mutex g_registry_lock;
std::map<ncclComm*, CommPtr> g_registry;  // live communicators

ncclComm_t register_comm(CommPtr c) {
  std::lock_guard guard(g_registry_lock);
  g_registry[c.get()] = c;
  return c.get();
}

bool unregister_comm(ncclComm_t handle) {
  std::lock_guard guard(g_registry_lock);
  return g_registry.erase(handle) > 0;
}

// Returns when no piece of c is queued or running, or once c is aborted.
void wait_idle(ncclComm& c) {
  std::unique_lock guard(c.lock);
  c.changed.wait(guard, [&] { return c.queued == 0 || c.aborted; });
}

// ---- the unique id: its creator's MPI_COMM_WORLD rank and a nonce unique in that process ----
constexpr char kMagic[8] = "gpusimN";

struct IdFields {
  char magic[8];
  int32_t creator;
  int32_t reserved;
  int64_t nonce;
};
static_assert(sizeof(IdFields) <= NCCL_UNIQUE_ID_BYTES, "the id's fields fit in ncclUniqueId");

int64_t fresh_nonce() {
  static const uint64_t seed = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}() ^
                               uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  static std::atomic<uint64_t> serial{0};
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * ++serial;  // splitmix64: distinct serials, distinct nonces
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return int64_t(z ^ (z >> 31));
}

// MPI_Comm_create_group's tag for the communicator of the id with this nonce.
int create_tag(int64_t nonce) {
  int* upper = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &upper, &found);
  const uint64_t range = uint64_t(found ? *upper : 32767) - kCreateTagBase + 1;
  return kCreateTagBase + int(uint64_t(nonce) % range);
}

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// ---- the rendezvous's messages: int64 arrays that start with the id's nonce ----
struct Letter {
  int source;
  std::vector<int64_t> body;
};

// Letters on MPI_COMM_WORLD's reserved tags, received by whichever thread polls and kept until the
// rendezvous they belong to takes them (concurrent ncclCommInitRank calls never take each other's).
class Mailbox {
 public:
  // The next letter with this tag and nonce; `stalled` is printed once after 30 s of waiting.
  Letter take(int tag, int64_t nonce, const std::string& stalled) {
    const auto start = std::chrono::steady_clock::now();
    bool warned = false;
    for (int round = 0;; poll_pause(round)) {
      if (auto letter = find(tag, nonce)) return *letter;
      if (!warned && std::chrono::steady_clock::now() - start > std::chrono::seconds(30)) {
        std::fprintf(stderr, "gpu-sim NCCL: %s\n", stalled.c_str());
        warned = true;
      }
    }
  }

 private:
  struct Kept {
    int tag;
    Letter letter;
  };

  std::unique_ptr<Letter> find(int tag, int64_t nonce) {
    std::lock_guard guard(lock_);
    for (;;) {
      for (auto it = kept_.begin(); it != kept_.end(); ++it) {
        if (it->tag != tag || it->letter.body.at(0) != nonce) continue;
        auto letter = std::make_unique<Letter>(std::move(it->letter));
        kept_.erase(it);
        return letter;
      }
      if (!receive(tag)) return nullptr;
    }
  }
  bool receive(int tag) {
    int arrived = 0, count = 0;
    MPI_Message message;
    MPI_Status status;
    MPI_Improbe(MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, &arrived, &message, &status);
    if (!arrived) return false;
    MPI_Get_count(&status, MPI_INT64_T, &count);
    Kept k{tag, Letter{status.MPI_SOURCE, std::vector<int64_t>(size_t(count))}};
    MPI_Mrecv(k.letter.body.data(), count, MPI_INT64_T, &message, MPI_STATUS_IGNORE);
    kept_.push_back(std::move(k));
    return true;
  }

  std::mutex lock_;
  std::vector<Kept> kept_;
};

Mailbox& mailbox() {
  static Mailbox box;
  return box;
}

// A letter on its way. MPI may complete a send only once it is received (a send to this process
// itself is), so a rendezvous waits for its letters after it has its reply.
struct Posted {
  std::vector<int64_t> body;
  MPI_Request request;
};

Posted post_letter(int dest, int tag, std::vector<int64_t> body) {
  Posted p{std::move(body), MPI_REQUEST_NULL};
  MPI_Isend(p.body.data(), int(p.body.size()), MPI_INT64_T, dest, tag, MPI_COMM_WORLD, &p.request);
  return p;
}

void complete(std::vector<Posted>& letters) {
  std::vector<MPI_Request> requests;
  for (const Posted& p : letters) requests.push_back(p.request);
  wait_all(requests, nullptr, {}, "ncclCommInitRank");
}

// The creator's side: collects the nranks joins, checks them, and answers every joiner with the
// members' MPI ranks by NCCL rank (status 0) or a refusal (status 1, the reason printed here).
std::vector<Posted> serve(const IdFields& id, int nranks) {
  std::vector<int64_t> reply(size_t(nranks) + 2, -1);
  std::vector<int> sources;
  std::string refusal;
  for (int i = 0; i < nranks; ++i) {
    const Letter join = mailbox().take(kJoinTag, id.nonce,
                                       "ncclCommInitRank: MPI rank " + std::to_string(id.creator) +
                                           " (which made the id) has waited 30 s for " + "the other members to join (" +
                                           std::to_string(nranks) + " ranks in all)");
    const int64_t n = join.body.at(1), r = join.body.at(2);
    if (std::count(sources.begin(), sources.end(), join.source))
      refusal = "MPI rank " + std::to_string(join.source) + " joined twice (one process is one rank in gpu-sim)";
    else if (n != nranks)
      refusal = "MPI rank " + std::to_string(join.source) + " says nranks " + std::to_string(n) + ", the creator " +
                std::to_string(nranks);
    else if (reply[size_t(r) + 2] != -1)
      refusal = "NCCL rank " + std::to_string(r) + " claimed by MPI ranks " + std::to_string(reply[size_t(r) + 2]) +
                " and " + std::to_string(join.source);
    else
      reply[size_t(r) + 2] = join.source;
    sources.push_back(join.source);
  }
  reply[0] = id.nonce;
  reply[1] = refusal.empty() ? 0 : 1;
  if (!refusal.empty()) fail(ncclInvalidUsage, "ncclCommInitRank: rendezvous refused: " + refusal);
  std::vector<Posted> replies;
  for (int s : sources) replies.push_back(post_letter(s, kReplyTag, reply));
  return replies;
}

// Joins the rendezvous of `id`; on success, members holds the MPI_COMM_WORLD rank of each NCCL rank.
ncclResult_t rendezvous(const IdFields& id, int nranks, int rank, std::vector<int>* members) {
  std::vector<Posted> letters;
  letters.push_back(post_letter(id.creator, kJoinTag, {id.nonce, nranks, rank}));
  if (world_rank() == id.creator)
    for (Posted& p : serve(id, nranks)) letters.push_back(std::move(p));
  const Letter reply = mailbox().take(
      kReplyTag, id.nonce,
      "ncclCommInitRank (rank " + std::to_string(rank) + " of " + std::to_string(nranks) + ") has waited 30 s for " +
          "the rendezvous of MPI rank " + std::to_string(id.creator) + ", which made the id: in gpu-sim that " +
          "process must call ncclCommInitRank with the id too, and all ranks must join");
  complete(letters);
  if (reply.body.at(1) != 0)
    return fail(ncclInvalidUsage, "ncclCommInitRank: the rendezvous was refused (MPI rank " +
                                      std::to_string(id.creator) + " printed why)");
  members->assign(reply.body.begin() + 2, reply.body.end());
  return ncclSuccess;
}

// Makes the communicator of `members` (ranks in parent, by NCCL rank); every member calls it.
ncclResult_t make_comm(const char* call, MPI_Comm parent, const std::vector<int>& members, int tag, int device,
                       ncclComm_t* out) {
  MPI_Group all, group;
  MPI_Comm_group(parent, &all);
  MPI_Group_incl(all, int(members.size()), members.data(), &group);
  auto c = std::make_shared<ncclComm>();
  int rc = MPI_Comm_create_group(parent, group, tag, &c->ops);
  MPI_Group_free(&group);
  MPI_Group_free(&all);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(c->ops, MPI_ERRORS_RETURN);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_dup(c->ops, &c->control);  // the error handler comes along
  if (rc != MPI_SUCCESS) return fail(ncclSystemError, std::string(call) + ": MPI error: " + mpi_error_text(rc));
  MPI_Comm_rank(c->ops, &c->rank);
  MPI_Comm_size(c->ops, &c->size);
  c->device = device;
  *out = register_comm(std::move(c));
  return ncclSuccess;
}

ncclResult_t read_id(const ncclUniqueId& raw, IdFields* id) {
  std::memcpy(id, raw.internal, sizeof *id);
  if (std::memcmp(id->magic, kMagic, sizeof kMagic) != 0 || id->creator < 0 || id->creator >= world_size())
    return fail(ncclInvalidArgument, "ncclCommInitRank: the id was not made by gpu-sim's ncclGetUniqueId");
  return ncclSuccess;
}

// The members of my colour, by (key, parent rank), from everyone's (colour, key) pairs.
std::vector<int> colour_members(const std::vector<int>& pairs, int colour) {
  std::vector<int> members;
  for (int r = 0; r < int(pairs.size() / 2); ++r)
    if (pairs[size_t(2 * r)] == colour) members.push_back(r);
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return pairs[size_t(2 * a + 1)] < pairs[size_t(2 * b + 1)]; });
  return members;
}

}  // namespace

CommPtr find_comm(ncclComm_t handle, const char* call) {
  {
    std::lock_guard guard(g_registry_lock);
    if (auto it = g_registry.find(handle); it != g_registry.end()) return it->second;
  }
  fail(ncclInvalidArgument,
       std::string(call) + ": " +
           (handle ? "the communicator was destroyed or aborted, or never made" : "the communicator is NULL"));
  return nullptr;
}

}  // namespace gpusim::nccl

using namespace gpusim::nccl;

extern "C" {

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (!uniqueId) return fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  if (const ncclResult_t r = check_mpi("ncclGetUniqueId"); r != ncclSuccess) return r;
  IdFields id{};
  std::memcpy(id.magic, kMagic, sizeof kMagic);
  id.creator = world_rank();
  id.nonce = fresh_nonce();
  *uniqueId = ncclUniqueId{};
  std::memcpy(uniqueId->internal, &id, sizeof id);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  if (!comm) return fail(ncclInvalidArgument, "ncclCommInitRank: comm is NULL");
  *comm = nullptr;
  if (const ncclResult_t r = check_mpi("ncclCommInitRank"); r != ncclSuccess) return r;
  const int world = world_size();
  if (nranks < 1 || nranks > world || rank < 0 || rank >= nranks)
    return fail(ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) + " of " +
                                         std::to_string(nranks) + " ranks (one per MPI process, " +
                                         std::to_string(world) + " processes)");
  if (in_group())
    return fail(ncclInvalidUsage, "ncclCommInitRank inside ncclGroupStart/End is not implemented in gpu-sim");
  IdFields id;
  if (const ncclResult_t r = read_id(commId, &id); r != ncclSuccess) return r;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess)
    return fail(ncclUnhandledCudaError, "ncclCommInitRank: no current CUDA device");
  std::vector<int> members;
  if (const ncclResult_t r = rendezvous(id, nranks, rank, &members); r != ncclSuccess) return r;
  return make_comm("ncclCommInitRank", MPI_COMM_WORLD, members, create_tag(id.nonce), device, comm);
}

// Collective over the parent's members, on the host: abortable while the colours are gathered.
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t*) {
  if (!newcomm) return fail(ncclInvalidArgument, "ncclCommSplit: newcomm is NULL");
  *newcomm = nullptr;
  const CommPtr parent = find_comm(comm, "ncclCommSplit");
  if (!parent) return ncclInvalidArgument;
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return fail(ncclInvalidArgument, "ncclCommSplit: color " + std::to_string(color) + " (NCCL_SPLIT_NOCOLOR or >= 0)");
  auto pairs = std::make_shared<std::vector<int>>(size_t(2 * parent->size) + 2);
  int* mine = pairs->data() + 2 * parent->size;
  mine[0] = color;
  mine[1] = key;
  std::vector<MPI_Request> request(1);
  MPI_Iallgather(mine, 2, MPI_INT, pairs->data(), 2, MPI_INT, parent->control, request.data());
  if (const ncclResult_t r = wait_all(request, nullptr, {parent.get()}, "ncclCommSplit"); r != ncclSuccess) {
    abandon(std::move(request), pairs);
    return fail(r, std::string("ncclCommSplit: ") + interruption_text(r));
  }
  if (color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
  pairs->resize(size_t(2 * parent->size));
  return make_comm("ncclCommSplit", parent->control, colour_members(*pairs, color), kSplitTag, parent->device, newcomm);
}

// Waits for the communicator's queued operations (NCCL's "flush").
ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  const CommPtr c = find_comm(comm, "ncclCommFinalize");
  if (!c) return ncclInvalidArgument;
  wait_idle(*c);
  return ncclSuccess;
}

// Waits for the communicator's queued operations, then frees it. Its MPI communicators are freed
// only if nothing failed: after a failure or an abort, messages or requests may be left in them, and
// MPI could hand their context to a new communicator.
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  const CommPtr c = find_comm(comm, "ncclCommDestroy");
  if (!c) return ncclInvalidArgument;
  wait_idle(*c);
  if (!unregister_comm(comm)) return ncclSuccess;  // aborted by another thread meanwhile
  if (interruption(*c) == ncclSuccess) {
    MPI_Comm_free(&c->control);
    MPI_Comm_free(&c->ops);
  }
  return ncclSuccess;
}

// Callable from any thread while operations or host calls of the communicator are blocked: they
// return (host calls with ncclInternalError) and the peers are told (their operations fail with
// ncclRemoteError). Pieces still queued end without running when their stream reaches them.
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  const CommPtr c = find_comm(comm, "ncclCommAbort");
  if (!c) return ncclInvalidArgument;
  {
    std::lock_guard guard(c->lock);
    c->aborted = true;
  }
  c->changed.notify_all();
  for (int peer = 0; peer < c->size; ++peer) {
    if (peer == c->rank) continue;
    MPI_Request notice;
    MPI_Isend(nullptr, 0, MPI_BYTE, peer, kAbortNotice, c->control, &notice);
    MPI_Request_free(&notice);
  }
  unregister_comm(comm);
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (!asyncError) return fail(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
  const CommPtr c = find_comm(comm, "ncclCommGetAsyncError");
  if (!c) return ncclInvalidArgument;
  *asyncError = interruption(*c);
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  const CommPtr c = find_comm(comm, "ncclCommCount");
  if (!c || !count) return c ? fail(ncclInvalidArgument, "ncclCommCount: count is NULL") : ncclInvalidArgument;
  *count = c->size;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  const CommPtr c = find_comm(comm, "ncclCommCuDevice");
  if (!c || !device) return c ? fail(ncclInvalidArgument, "ncclCommCuDevice: device is NULL") : ncclInvalidArgument;
  *device = c->device;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  const CommPtr c = find_comm(comm, "ncclCommUserRank");
  if (!c || !rank) return c ? fail(ncclInvalidArgument, "ncclCommUserRank: rank is NULL") : ncclInvalidArgument;
  *rank = c->rank;
  return ncclSuccess;
}

}  // extern "C"
