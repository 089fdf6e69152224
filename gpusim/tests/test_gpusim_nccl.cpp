// gpu-sim's NCCL over MPI against NCCL's documented semantics, at 1, 2 and 4 ranks: every collective
// for every implemented data type and reduction, in place and out of place, every root; the
// rendezvous (NCCL ranks in any order, concurrent initialisations), splits, one-rank communicators;
// point-to-point in groups (rings, sends to self, pairing by order) and the lazy connection that
// blocks the host; ordering against the stream's earlier work and between two streams of one
// communicator; device faults on host pointers; and where NCCL hangs (two ranks that both send first,
// a send whose peer never receives, a collective that one rank never joins): the test checks that it
// hangs, then that ncclCommAbort releases it. Every hang is bounded by a thread that aborts. Expected
// values are computed here from the inputs.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// ---- communicators, streams, buffers ----

// An id made by world rank `creator` and handed to every rank over MPI.
ncclUniqueId shared_id(int creator) {
  ncclUniqueId id{};
  if (world_rank() == creator) {
    EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  }
  MPI_Bcast(&id, sizeof id, MPI_BYTE, creator, MPI_COMM_WORLD);
  return id;
}

ncclComm_t init(int nranks, const ncclUniqueId& id, int rank) {
  ncclComm_t comm = nullptr;
  EXPECT_EQ(ncclCommInitRank(&comm, nranks, id, rank), ncclSuccess);
  return comm;
}

// Every world rank, with the same rank in NCCL.
ncclComm_t world_comm() { return init(world_size(), shared_id(0), world_rank()); }

// This rank alone (its own id).
ncclComm_t own_comm() {
  ncclUniqueId id{};
  EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  return init(1, id, 0);
}

ncclComm_t split(ncclComm_t parent, int color, int key) {
  ncclComm_t comm = nullptr;
  EXPECT_EQ(ncclCommSplit(parent, color, key, &comm, nullptr), ncclSuccess);
  return comm;
}

int rank_in(ncclComm_t comm) {
  int r = -1;
  EXPECT_EQ(ncclCommUserRank(comm, &r), ncclSuccess);
  return r;
}

int size_of(ncclComm_t comm) {
  int n = 0;
  EXPECT_EQ(ncclCommCount(comm, &n), ncclSuccess);
  return n;
}

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess); }
  ~Stream() { cudaStreamDestroy(s); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

// Device memory (cudaMalloc fills it with 0xFF bytes), read and written with cudaMemcpy.
template <class T>
struct Buffer {
  T* p = nullptr;
  size_t n;
  explicit Buffer(size_t count) : n(count) { EXPECT_EQ(cudaMalloc(&p, n * sizeof(T) + 1), cudaSuccess); }
  explicit Buffer(const std::vector<T>& host) : Buffer(host.size()) { write(host); }
  ~Buffer() { cudaFree(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void write(const std::vector<T>& host) {
    EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<T> read() const {
    std::vector<T> host(n);
    EXPECT_EQ(cudaMemcpy(host.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
};

// Aborts the communicator from a thread of its own after `seconds`, unless stopped first: the bound of
// a test that may hang.
class AbortAfter {
 public:
  AbortAfter(ncclComm_t comm, double seconds)
      : thread_([this, comm, seconds] {
          std::unique_lock lock(mutex_);
          if (stopped_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return stop_; })) return;
          fired_ = true;
          ncclCommAbort(comm);
        }) {}
  ~AbortAfter() { stop(); }
  AbortAfter(const AbortAfter&) = delete;
  AbortAfter& operator=(const AbortAfter&) = delete;
  // Stops the thread; true if it had aborted the communicator (which is then gone).
  bool stop() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    stopped_.notify_all();
    return join();
  }
  // Waits until the thread has aborted the communicator (or was stopped); true if it aborted.
  bool join() {
    if (thread_.joinable()) thread_.join();
    return fired_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable stopped_;
  bool stop_ = false;
  bool fired_ = false;
  std::thread thread_;
};

// The stream's work stays unfinished for `seconds` (checked every 10 ms).
bool stays_busy(cudaStream_t s, double seconds) {
  const auto start = Clock::now();
  while (seconds_since(start) < seconds) {
    if (cudaStreamQuery(s) != cudaErrorNotReady) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// The asynchronous error of comm within `seconds` (ncclSuccess if none came).
ncclResult_t async_error_within(ncclComm_t comm, double seconds) {
  const auto start = Clock::now();
  ncclResult_t e = ncclSuccess;
  while (e == ncclSuccess && seconds_since(start) < seconds) {
    EXPECT_EQ(ncclCommGetAsyncError(comm, &e), ncclSuccess);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return e;
}

// Ranks in pairs (0,1), (2,3), ...: the pair's communicator (split off `world`) and an MPI
// communicator for barriers between the two; a rank without a partner gets neither.
struct Pair {
  ncclComm_t comm = nullptr;
  MPI_Comm mpi = MPI_COMM_NULL;
  int rank = -1, peer = -1;
  explicit Pair(ncclComm_t world) {
    const bool paired = (world_rank() ^ 1) < world_size();
    const int color = paired ? world_rank() / 2 : NCCL_SPLIT_NOCOLOR;
    comm = split(world, color, world_rank());
    MPI_Comm_split(MPI_COMM_WORLD, paired ? color : MPI_UNDEFINED, world_rank(), &mpi);
    if (!paired) return;
    rank = rank_in(comm);
    peer = 1 - rank;
  }
  ~Pair() {
    if (mpi != MPI_COMM_NULL) MPI_Comm_free(&mpi);
  }
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;
};

// ---- data types and reductions ----

template <class T>
ncclDataType_t nccl_type();
template <>
ncclDataType_t nccl_type<int8_t>() {
  return ncclInt8;
}
template <>
ncclDataType_t nccl_type<uint8_t>() {
  return ncclUint8;
}
template <>
ncclDataType_t nccl_type<int32_t>() {
  return ncclInt32;
}
template <>
ncclDataType_t nccl_type<uint32_t>() {
  return ncclUint32;
}
template <>
ncclDataType_t nccl_type<int64_t>() {
  return ncclInt64;
}
template <>
ncclDataType_t nccl_type<uint64_t>() {
  return ncclUint64;
}
template <>
ncclDataType_t nccl_type<float>() {
  return ncclFloat32;
}
template <>
ncclDataType_t nccl_type<double>() {
  return ncclFloat64;
}

// Small values (1..7), so that sums and products of 4 ranks fit every type exactly.
template <class T>
T value(int rank, size_t i, int salt = 0) {
  return T(1 + (size_t(rank) * 5 + i + size_t(salt) * 3) % 7);
}

template <class T>
std::vector<T> values(int rank, size_t n, int salt = 0) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = value<T>(rank, i, salt);
  return v;
}

// What NCCL's reduction of every rank's value(r, i, salt) gives (ncclAvg: the sum divided by the
// number of ranks, truncated for integers).
template <class T>
T reduced(ncclRedOp_t op, int nranks, size_t i, int salt = 0) {
  T acc = value<T>(0, i, salt);
  for (int r = 1; r < nranks; ++r) {
    const T v = value<T>(r, i, salt);
    switch (op) {
      case ncclProd:
        acc = T(acc * v);
        break;
      case ncclMax:
        acc = std::max(acc, v);
        break;
      case ncclMin:
        acc = std::min(acc, v);
        break;
      default:
        acc = T(acc + v);
    }
  }
  return op == ncclAvg ? T(acc / T(nranks)) : acc;
}

// reduced() at positions [first, first + n). Results are compared whole (EXPECT, not ASSERT), so that
// a rank with a wrong result still makes the calls its peers make.
template <class T>
std::vector<T> reduced_values(ncclRedOp_t op, int nranks, size_t n, int salt = 0, size_t first = 0) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = reduced<T>(op, nranks, first + i, salt);
  return v;
}

// Block r (of `block` elements) of v.
template <class T>
std::vector<T> block_of(const std::vector<T>& v, int r, size_t block) {
  const auto first = v.begin() + std::ptrdiff_t(block) * r;
  return std::vector<T>(first, first + std::ptrdiff_t(block));
}

template <class T>
class GpuSimNcclTyped : public testing::Test {};
using Types = testing::Types<int8_t, uint8_t, int32_t, uint32_t, int64_t, uint64_t, float, double>;
TYPED_TEST_SUITE(GpuSimNcclTyped, Types);

// Every reduction, out of place and in place.
TYPED_TEST(GpuSimNcclTyped, AllReduceEveryOp) {
  using T = TypeParam;
  const ncclComm_t comm = world_comm();
  const Stream s;
  const int n = world_size(), me = world_rank();
  const size_t count = 37;
  for (ncclRedOp_t op : {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg}) {
    for (bool in_place : {false, true}) {
      Buffer<T> send(values<T>(me, count, op)), recv(count);
      T* out = in_place ? send.p : recv.p;
      ASSERT_EQ(ncclAllReduce(send.p, out, count, nccl_type<T>(), op, comm, s.s), ncclSuccess);
      ASSERT_EQ(cudaStreamSynchronize(s.s), cudaSuccess);
      EXPECT_EQ((in_place ? send : recv).read(), reduced_values<T>(op, n, count, op))
          << "op " << op << (in_place ? " in place" : "");
    }
  }
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// From and to every root, a different count for each; in place for even roots. A non-root's receive
// buffer of a reduce stays untouched.
TYPED_TEST(GpuSimNcclTyped, BroadcastAndReduceEveryRoot) {
  using T = TypeParam;
  const ncclComm_t comm = world_comm();
  const Stream s;
  const int n = world_size(), me = world_rank();
  for (int root = 0; root < n; ++root) {
    const size_t count = 5 + 3 * size_t(root);
    const bool in_place = root % 2 == 0;
    Buffer<T> send(values<T>(me, count, root)), recv(std::vector<T>(count, T(0)));
    ASSERT_EQ(ncclBroadcast(send.p, in_place ? send.p : recv.p, count, nccl_type<T>(), root, comm, s.s), ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s.s), cudaSuccess);
    EXPECT_EQ((in_place ? send : recv).read(), values<T>(root, count, root)) << "broadcast from " << root;

    Buffer<T> mine(values<T>(me, count, root)), sum(std::vector<T>(count, T(0)));
    T* out = in_place ? mine.p : sum.p;
    ASSERT_EQ(ncclReduce(mine.p, out, count, nccl_type<T>(), ncclSum, root, comm, s.s), ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s.s), cudaSuccess);
    const std::vector<T> untouched = in_place ? values<T>(me, count, root) : std::vector<T>(count, T(0));
    EXPECT_EQ((in_place ? mine : sum).read(), me == root ? reduced_values<T>(ncclSum, n, count, root) : untouched)
        << "reduce to " << root;
  }
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// Out of place, and in place: all-gather's input is this rank's block of the output, reduce-scatter's
// output this rank's block of the input.
TYPED_TEST(GpuSimNcclTyped, AllGatherAndReduceScatter) {
  using T = TypeParam;
  const ncclComm_t comm = world_comm();
  const Stream s;
  const int n = world_size(), me = world_rank();
  const size_t block = 6, all = block * size_t(n);
  for (bool in_place : {false, true}) {
    Buffer<T> mine(values<T>(me, block)), gathered(all);
    const T* in = mine.p;
    if (in_place) {
      std::vector<T> start(all, T(0));
      std::copy_n(values<T>(me, block).begin(), block, start.begin() + std::ptrdiff_t(block) * me);
      gathered.write(start);
      in = gathered.p + block * size_t(me);
    }
    ASSERT_EQ(ncclAllGather(in, gathered.p, block, nccl_type<T>(), comm, s.s), ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s.s), cudaSuccess);
    std::vector<T> expected;
    for (int r = 0; r < n; ++r) {
      const auto theirs = values<T>(r, block);
      expected.insert(expected.end(), theirs.begin(), theirs.end());
    }
    EXPECT_EQ(gathered.read(), expected) << "all-gather" << (in_place ? " in place" : "");

    // Rank r contributes value(r, j) at position j of the whole input.
    Buffer<T> whole(values<T>(me, all)), part(std::vector<T>(block, T(0)));
    T* out = in_place ? whole.p + block * size_t(me) : part.p;
    ASSERT_EQ(ncclReduceScatter(whole.p, out, block, nccl_type<T>(), ncclSum, comm, s.s), ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s.s), cudaSuccess);
    const auto result = in_place ? block_of(whole.read(), me, block) : part.read();
    EXPECT_EQ(result, reduced_values<T>(ncclSum, n, block, 0, block * size_t(me)))
        << "reduce-scatter" << (in_place ? " in place" : "");
  }
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// bfloat16 (trident's mesh.grad_reduce_dtype = "bf16"): every reduction combines two elements in fp32 and
// rounds the result to bf16, for ncclAllReduce and ncclReduce. Rank r holds r + 1 + (j mod 5) at
// position j: sums, products (every partial product of up to 4 ranks has at most 8 significant bits),
// maxima and minima stay exact in bf16 (the average where n is 1, 2 or 4).
TEST(GpuSimNccl, Bfloat16ReductionsRoundEachResultToBfloat16) {
  const ncclComm_t comm = world_comm();
  const Stream s;
  const int n = world_size(), me = world_rank();
  const size_t count = 23;
  const auto bits_of = [](float x) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    return uint16_t(u >> 16);  // x is exact in bf16 here
  };
  const auto value_of = [](uint16_t b) {
    const uint32_t u = uint32_t(b) << 16;
    float x;
    std::memcpy(&x, &u, sizeof x);
    return x;
  };
  const auto mine = [&](int r, size_t j) { return float(r + 1 + int(j % 5)); };
  for (ncclRedOp_t op : {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg}) {
    std::vector<uint16_t> host(count);
    for (size_t j = 0; j < count; ++j) host[j] = bits_of(mine(me, j));
    Buffer<uint16_t> buf(host);
    ASSERT_EQ(ncclAllReduce(buf.p, buf.p, count, ncclBfloat16, op, comm, s.s), ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s.s), cudaSuccess);
    const std::vector<uint16_t> got = buf.read();
    for (size_t j = 0; j < count; ++j) {
      float want = op == ncclMax ? mine(n - 1, j) : mine(0, j);
      if (op == ncclSum || op == ncclAvg) {
        want = 0;
        for (int r = 0; r < n; ++r) want += mine(r, j);
        if (op == ncclAvg) want /= float(n);
      }
      if (op == ncclProd) {
        want = 1;
        for (int r = 0; r < n; ++r) want *= mine(r, j);
      }
      if (op != ncclAvg || n == 1 || n == 2 || n == 4) {
        EXPECT_EQ(value_of(got[j]), want) << "op " << op << " at " << j;
      }
    }
  }
  // 256 on rank 0 and 1 on the others: bf16's step at 256 is 2, so 256 + 1 rounds to 256 (ties to even),
  // where an fp32 sum would give 255 + n. Every result lies on bf16's grid.
  Buffer<uint16_t> sum(std::vector<uint16_t>(count, bits_of(me == 0 ? 256.0f : 1.0f)));
  ASSERT_EQ(ncclAllReduce(sum.p, sum.p, count, ncclBfloat16, ncclSum, comm, s.s), ncclSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s.s), cudaSuccess);
  for (uint16_t b : sum.read()) {
    const float v = value_of(b);
    if (n == 2) {
      EXPECT_EQ(v, 256.0f) << "256 + 1 in bf16";
    }
    EXPECT_EQ(std::fmod(v, 2.0f), 0.0f) << v << " is not on bf16's grid";
    EXPECT_GE(v, 256.0f);
    EXPECT_LE(v, 256.0f + 2.0f * float(n));
  }
  // ncclReduce (trident's ZeRO 2 and 3 reduce each gradient segment to its owner): the last rank's buffer
  // receives the bf16 sum, in place; the others' stay as they were.
  const int root = n - 1;
  std::vector<uint16_t> host(count);
  for (size_t j = 0; j < count; ++j) host[j] = bits_of(mine(me, j));
  Buffer<uint16_t> owned(host);
  ASSERT_EQ(ncclReduce(owned.p, owned.p, count, ncclBfloat16, ncclSum, root, comm, s.s), ncclSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s.s), cudaSuccess);
  const std::vector<uint16_t> reduced = owned.read();
  for (size_t j = 0; j < count; ++j) {
    float want = 0;
    for (int r = 0; r < n; ++r) want += mine(r, j);
    EXPECT_EQ(value_of(reduced[j]), me == root ? want : mine(me, j)) << "reduce at " << j;
  }
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// ncclBroadcast of bfloat16 (trident's bf16 working copy: the ZeRO 1/2 broadcast and ZeRO-3's gathers
// move the parameters' bf16 patterns): from every root, every rank ends with the root's patterns bit for
// bit, whatever they are (all 16 bits set here, a NaN pattern among them), in place.
TEST(GpuSimNccl, Bfloat16BroadcastCopiesTheRootsPatternsFromEveryRoot) {
  const ncclComm_t comm = world_comm();
  const Stream s;
  const int n = world_size(), me = world_rank();
  const size_t count = 37;
  const auto pattern = [](int r, size_t j) { return uint16_t(0x3f81u + 0x0101u * unsigned(r) + unsigned(j) * 0x0403u); };
  for (int root = 0; root < n; ++root) {
    std::vector<uint16_t> host(count);
    for (size_t j = 0; j < count; ++j) host[j] = j == 5 ? uint16_t(0x7fc1u) : pattern(me, j);
    Buffer<uint16_t> buf(host);
    ASSERT_EQ(ncclBroadcast(buf.p, buf.p, count, ncclBfloat16, root, comm, s.s), ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s.s), cudaSuccess);
    const std::vector<uint16_t> got = buf.read();
    for (size_t j = 0; j < count; ++j)
      EXPECT_EQ(got[j], j == 5 ? uint16_t(0x7fc1u) : pattern(root, j)) << "root " << root << " at " << j;
  }
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// ---- library and arguments ----

TEST(GpuSimNccl, VersionAndErrorStrings) {
  int version = 0;
  ASSERT_EQ(ncclGetVersion(&version), ncclSuccess);
  EXPECT_EQ(version, 22809);
  EXPECT_EQ(NCCL_VERSION_CODE, 22809);
  EXPECT_STREQ(ncclGetErrorString(ncclSuccess), "no error");
  EXPECT_STRNE(ncclGetErrorString(ncclInvalidArgument), ncclGetErrorString(ncclInvalidUsage));
  int count = 0;
  EXPECT_EQ(ncclCommCount(nullptr, &count), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("NULL"), std::string::npos) << ncclGetLastError(nullptr);
}

// Bad arguments fail at the call; inside a group they also fail ncclGroupEnd, which then drops the
// group's calls. Half is not implemented yet.
TEST(GpuSimNccl, ArgumentErrors) {
  const ncclComm_t comm = world_comm();
  const Stream s;
  const int n = world_size();
  Buffer<float> x(std::vector<float>(8, 1.f));
  EXPECT_EQ(ncclAllReduce(x.p, x.p, 8, ncclFloat16, ncclSum, comm, s.s), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(x.p, x.p, 8, ncclFloat, ncclRedOp_t(9), comm, s.s), ncclInvalidArgument);
  EXPECT_EQ(ncclBroadcast(x.p, x.p, 8, ncclFloat, n, comm, s.s), ncclInvalidArgument);
  EXPECT_EQ(ncclReduce(x.p, x.p, 8, ncclFloat, ncclSum, -1, comm, s.s), ncclInvalidArgument);
  EXPECT_EQ(ncclSend(x.p, 8, ncclFloat, n, comm, s.s), ncclInvalidArgument);
  EXPECT_EQ(ncclRecv(x.p, 8, ncclFloat, -1, comm, s.s), ncclInvalidArgument);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  ncclComm_t other = nullptr;
  EXPECT_EQ(ncclCommSplit(comm, -5, 0, &other, nullptr), ncclInvalidArgument);
  const ncclUniqueId junk{};
  EXPECT_EQ(ncclCommInitRank(&other, 1, junk, 0), ncclInvalidArgument);
  ncclUniqueId id{};
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  EXPECT_EQ(ncclCommInitRank(&other, n + 1, id, 0), ncclInvalidArgument) << "more ranks than MPI processes";
  EXPECT_EQ(ncclCommInitRank(&other, 1, id, 1), ncclInvalidArgument);

  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(x.p, x.p, 8, ncclFloat, ncclSum, comm, s.s), ncclSuccess);
  EXPECT_EQ(ncclBroadcast(x.p, x.p, 8, ncclFloat, -3, comm, s.s), ncclInvalidArgument);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidArgument);
  ASSERT_EQ(cudaStreamSynchronize(s.s), cudaSuccess);
  EXPECT_EQ(x.read(), std::vector<float>(8, 1.f)) << "the failed group's all-reduce ran";
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// ---- communicators ----

// The id's creator need not be NCCL rank 0, nor NCCL ranks follow MPI's: here the last MPI rank makes
// the id and NCCL ranks are reversed, which an all-gather of MPI ranks shows.
TEST(GpuSimNccl, InitRankOrdersByNcclRank) {
  const int n = world_size(), me = world_rank();
  const ncclComm_t comm = init(n, shared_id(n - 1), n - 1 - me);
  EXPECT_EQ(size_of(comm), n);
  EXPECT_EQ(rank_in(comm), n - 1 - me);
  int device = -1;
  EXPECT_EQ(ncclCommCuDevice(comm, &device), ncclSuccess);
  EXPECT_EQ(device, 0);
  const Stream s;
  Buffer<int32_t> mine(std::vector<int32_t>{me}), all(static_cast<size_t>(n));
  ASSERT_EQ(ncclAllGather(mine.p, all.p, 1, ncclInt32, comm, s.s), ncclSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s.s), cudaSuccess);
  const auto got = all.read();
  for (int r = 0; r < n; ++r) EXPECT_EQ(got[size_t(r)], n - 1 - r) << "NCCL rank " << r;
  ncclResult_t async = ncclInternalError;
  EXPECT_EQ(ncclCommGetAsyncError(comm, &async), ncclSuccess);
  EXPECT_EQ(async, ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  EXPECT_EQ(ncclCommCount(comm, &device), ncclInvalidArgument) << "a destroyed communicator is refused";
}

// Two host threads initialise two communicators at once (different creators): the rendezvous keep
// their messages apart.
TEST(GpuSimNccl, ConcurrentInitsDoNotMix) {
  const int n = world_size(), me = world_rank();
  const ncclUniqueId a = shared_id(0), b = shared_id(n - 1);
  ncclComm_t ca = nullptr, cb = nullptr;
  std::thread ta([&] { ca = init(n, a, me); });
  std::thread tb([&] { cb = init(n, b, n - 1 - me); });
  ta.join();
  tb.join();
  ASSERT_NE(ca, nullptr);
  ASSERT_NE(cb, nullptr);
  EXPECT_EQ(rank_in(ca), me);
  EXPECT_EQ(rank_in(cb), n - 1 - me);
  const Stream s;
  Buffer<int32_t> mine(std::vector<int32_t>{me}), all_a(static_cast<size_t>(n)), all_b(static_cast<size_t>(n));
  ASSERT_EQ(ncclAllGather(mine.p, all_a.p, 1, ncclInt32, ca, s.s), ncclSuccess);
  ASSERT_EQ(ncclAllGather(mine.p, all_b.p, 1, ncclInt32, cb, s.s), ncclSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s.s), cudaSuccess);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(all_a.read()[size_t(r)], r);
    EXPECT_EQ(all_b.read()[size_t(r)], n - 1 - r);
  }
  EXPECT_EQ(ncclCommDestroy(ca), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(cb), ncclSuccess);
}

// The MPI ranks in NCCL rank order of comm, by an all-gather.
std::vector<int32_t> members(ncclComm_t comm, cudaStream_t s) {
  Buffer<int32_t> mine(std::vector<int32_t>{world_rank()}), all(static_cast<size_t>(size_of(comm)));
  EXPECT_EQ(ncclAllGather(mine.p, all.p, 1, ncclInt32, comm, s), ncclSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  return all.read();
}

// Colours group the ranks, keys order them (ties by parent rank), NCCL_SPLIT_NOCOLOR gives NULL.
TEST(GpuSimNccl, SplitByColourAndKey) {
  const ncclComm_t world = world_comm();
  const Stream s;
  const int n = world_size(), me = world_rank();

  const ncclComm_t parity = split(world, me % 2, -me);  // descending MPI rank
  std::vector<int32_t> expected;
  for (int r = n - 1; r >= 0; --r)
    if (r % 2 == me % 2) expected.push_back(r);
  EXPECT_EQ(members(parity, s.s), expected);
  EXPECT_EQ(rank_in(parity), int(std::find(expected.begin(), expected.end(), me) - expected.begin()));
  int device = -1;
  EXPECT_EQ(ncclCommCuDevice(parity, &device), ncclSuccess);
  EXPECT_EQ(device, 0);

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  ncclComm_t tied = nullptr;
  EXPECT_EQ(ncclCommSplit(world, 7, 0, &tied, &config), ncclSuccess);
  expected.resize(size_t(n));
  for (int r = 0; r < n; ++r) expected[size_t(r)] = r;
  EXPECT_EQ(members(tied, s.s), expected);

  const ncclComm_t without_0 = split(world, me == 0 ? NCCL_SPLIT_NOCOLOR : 3, me);
  EXPECT_EQ(without_0 == nullptr, me == 0);
  if (without_0) {
    EXPECT_EQ(size_of(without_0), n - 1);
    EXPECT_EQ(rank_in(without_0), me - 1);
  }
  for (ncclComm_t c : {parity, tied, without_0, world}) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

// A communicator of one rank: every collective is the identity and a grouped send to self arrives.
TEST(GpuSimNccl, OneRankCommunicator) {
  const ncclComm_t comm = own_comm();
  EXPECT_EQ(size_of(comm), 1);
  const Stream s;
  const auto v = values<float>(world_rank(), 16);
  Buffer<float> in(v), a(16), b(16), g(16), r(16), c(16), p(16);
  ASSERT_EQ(ncclAllReduce(in.p, a.p, 16, ncclFloat, ncclAvg, comm, s.s), ncclSuccess);
  ASSERT_EQ(ncclBroadcast(in.p, b.p, 16, ncclFloat, 0, comm, s.s), ncclSuccess);
  ASSERT_EQ(ncclAllGather(in.p, g.p, 16, ncclFloat, comm, s.s), ncclSuccess);
  ASSERT_EQ(ncclReduceScatter(in.p, r.p, 16, ncclFloat, ncclMax, comm, s.s), ncclSuccess);
  ASSERT_EQ(ncclReduce(in.p, c.p, 16, ncclFloat, ncclProd, 0, comm, s.s), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclRecv(p.p, 16, ncclFloat, 0, comm, s.s), ncclSuccess);
  ASSERT_EQ(ncclSend(in.p, 16, ncclFloat, 0, comm, s.s), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s.s), cudaSuccess);
  for (const Buffer<float>* out : {&a, &b, &g, &r, &c, &p}) EXPECT_EQ(out->read(), v);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// ncclCommDestroy waits for the communicator's queued operations.
TEST(GpuSimNccl, DestroyWaitsForQueuedOperations) {
  const ncclComm_t comm = own_comm();
  const Stream s;
  Buffer<float> x(std::vector<float>(4, 2.f)), y(4);
  static int delay_ms = 200;
  ASSERT_EQ(cudaLaunchHostFunc(
                s.s, [](void* ms) { std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<int*>(ms))); },
                &delay_ms),
            cudaSuccess);
  ASSERT_EQ(ncclAllReduce(x.p, y.p, 4, ncclFloat, ncclSum, comm, s.s), ncclSuccess);
  const auto start = Clock::now();
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  EXPECT_GT(seconds_since(start), 0.15);
  EXPECT_EQ(cudaStreamQuery(s.s), cudaSuccess);
  EXPECT_EQ(y.read(), std::vector<float>(4, 2.f));
}

// ---- ordering ----

struct Fill {
  float* data;
  std::vector<float> v;
};

// A collective starts after the stream's earlier work: a host function that writes the input late,
// and a copy from page-locked memory queued on the stream.
TEST(GpuSimNccl, CollectiveWaitsForTheStreamsEarlierWork) {
  const ncclComm_t comm = world_comm();
  const Stream s;
  const int n = world_size(), me = world_rank();
  const size_t count = 64;
  Buffer<float> x(count);
  Fill fill{x.p, values<float>(me, count)};
  ASSERT_EQ(cudaLaunchHostFunc(
                s.s,
                [](void* f) {
                  std::this_thread::sleep_for(std::chrono::milliseconds(100));
                  auto* job = static_cast<Fill*>(f);
                  std::memcpy(job->data, job->v.data(), job->v.size() * sizeof(float));
                },
                &fill),
            cudaSuccess);
  ASSERT_EQ(ncclAllReduce(x.p, x.p, count, ncclFloat, ncclSum, comm, s.s), ncclSuccess);
  float* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, count * sizeof(float)), cudaSuccess);
  for (size_t i = 0; i < count; ++i) pinned[i] = value<float>(me, i, 1);
  Buffer<float> y(count);
  ASSERT_EQ(cudaMemcpyAsync(y.p, pinned, count * sizeof(float), cudaMemcpyHostToDevice, s.s), cudaSuccess);
  ASSERT_EQ(ncclAllReduce(y.p, y.p, count, ncclFloat, ncclMax, comm, s.s), ncclSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s.s), cudaSuccess);
  EXPECT_EQ(x.read(), reduced_values<float>(ncclSum, n, count));
  EXPECT_EQ(y.read(), reduced_values<float>(ncclMax, n, count, 1));
  cudaFreeHost(pinned);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// One communicator on two streams: its operations run one at a time in issue order. Stream A's
// all-reduce waits behind a held host function; stream B's, issued after it, must wait for it too
// (MPI would otherwise pair B's with the other ranks' A).
TEST(GpuSimNccl, OneCommunicatorOnTwoStreamsRunsInIssueOrder) {
  const ncclComm_t comm = world_comm();
  const Stream a, b;
  const int n = world_size(), me = world_rank();
  const size_t count = 32;
  Buffer<float> x(values<float>(me, count, 0)), y(values<float>(me, count, 1));
  std::atomic<bool> release{false};
  ASSERT_EQ(cudaLaunchHostFunc(
                a.s,
                [](void* flag) {
                  while (!static_cast<std::atomic<bool>*>(flag)->load())
                    std::this_thread::sleep_for(std::chrono::milliseconds(1));
                },
                &release),
            cudaSuccess);
  ASSERT_EQ(ncclAllReduce(x.p, x.p, count, ncclFloat, ncclSum, comm, a.s), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(y.p, y.p, count, ncclFloat, ncclMax, comm, b.s), ncclSuccess);
  EXPECT_TRUE(stays_busy(b.s, 0.2)) << "stream B's operation ran before stream A's, issued earlier";
  release = true;
  ASSERT_EQ(cudaStreamSynchronize(a.s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(b.s), cudaSuccess);
  EXPECT_EQ(x.read(), reduced_values<float>(ncclSum, n, count));
  EXPECT_EQ(y.read(), reduced_values<float>(ncclMax, n, count, 1));
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// ---- point-to-point ----

// A ring (to self at one rank) as one group; the reverse ring in nested groups (an inner
// ncclGroupEnd issues nothing: issued alone, every rank's receive would wait for a send queued behind
// it); several sends to self in one group.
TEST(GpuSimNccl, GroupedRingsAndSendsToSelf) {
  const ncclComm_t comm = world_comm();
  AbortAfter bound(comm, 20);
  const Stream s;
  const int n = world_size(), me = world_rank();
  const int right = (me + 1) % n, left = (me + n - 1) % n;
  const size_t count = 50;
  Buffer<double> out(values<double>(me, count)), in(count), in2(count);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclSend(out.p, count, ncclFloat64, right, comm, s.s), ncclSuccess);
  ASSERT_EQ(ncclRecv(in.p, count, ncclFloat64, left, comm, s.s), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclRecv(in2.p, count, ncclFloat64, right, comm, s.s), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  ASSERT_EQ(ncclSend(out.p, count, ncclFloat64, left, comm, s.s), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s.s), cudaSuccess);
  EXPECT_EQ(in.read(), values<double>(left, count));
  EXPECT_EQ(in2.read(), values<double>(right, count));

  Buffer<int32_t> a(values<int32_t>(me, 8, 1)), b(values<int32_t>(me, 8, 2)), ra(8), rb(8);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclSend(a.p, 8, ncclInt32, me, comm, s.s), ncclSuccess);
  ASSERT_EQ(ncclSend(b.p, 8, ncclInt32, me, comm, s.s), ncclSuccess);
  ASSERT_EQ(ncclRecv(ra.p, 8, ncclInt32, me, comm, s.s), ncclSuccess);
  ASSERT_EQ(ncclRecv(rb.p, 8, ncclInt32, me, comm, s.s), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s.s), cudaSuccess);
  EXPECT_EQ(ra.read(), values<int32_t>(me, 8, 1));
  EXPECT_EQ(rb.read(), values<int32_t>(me, 8, 2));
  ASSERT_FALSE(bound.stop()) << "hung until aborted";
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// Sends and receives between two ranks pair by order (NCCL has no tags): two sends, not grouped,
// arrive in the receives in the order made.
TEST(GpuSimNccl, SendsPairWithReceivesByOrder) {
  const ncclComm_t world = world_comm();
  const Pair pair(world);
  if (pair.comm) {
    const Stream s;
    const size_t count = 20;
    const bool sender = pair.rank == 0;
    Buffer<uint8_t> first(count), second(count);
    if (sender) {
      first.write(values<uint8_t>(0, count, 1));
      second.write(values<uint8_t>(0, count, 2));
    }
    for (Buffer<uint8_t>* b : {&first, &second}) {
      if (sender) {
        ASSERT_EQ(ncclSend(b->p, count, ncclUint8, pair.peer, pair.comm, s.s), ncclSuccess);
      } else {
        ASSERT_EQ(ncclRecv(b->p, count, ncclUint8, pair.peer, pair.comm, s.s), ncclSuccess);
      }
    }
    ASSERT_EQ(cudaStreamSynchronize(s.s), cudaSuccess);
    EXPECT_EQ(first.read(), values<uint8_t>(0, count, 1));
    EXPECT_EQ(second.read(), values<uint8_t>(0, count, 2));
    EXPECT_EQ(ncclCommDestroy(pair.comm), ncclSuccess);
  }
  EXPECT_EQ(ncclCommDestroy(world), ncclSuccess);
}

// NCCL on a host pointer faults the device (cudaErrorIllegalAddress, sticky): a send/receive and a
// collective, each on a device of its own that no other test uses.
TEST(GpuSimNccl, HostPointerFaultsTheDevice) {
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  ASSERT_GE(devices, 3);
  std::vector<float> host(8, 1.f);
  for (bool point_to_point : {true, false}) {
    const int device = devices - (point_to_point ? 1 : 2);
    ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
    const ncclComm_t comm = own_comm();
    int on = -1;
    EXPECT_EQ(ncclCommCuDevice(comm, &on), ncclSuccess);
    EXPECT_EQ(on, device);
    {
      const Stream s;
      Buffer<float> d(8);
      if (point_to_point) {
        ASSERT_EQ(ncclGroupStart(), ncclSuccess);
        ASSERT_EQ(ncclSend(host.data(), 8, ncclFloat, 0, comm, s.s), ncclSuccess);
        ASSERT_EQ(ncclRecv(d.p, 8, ncclFloat, 0, comm, s.s), ncclSuccess);
        ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
      } else {
        ASSERT_EQ(ncclAllReduce(d.p, host.data(), 8, ncclFloat, ncclSum, comm, s.s), ncclSuccess);
      }
      EXPECT_EQ(cudaStreamSynchronize(s.s), cudaErrorIllegalAddress) << (point_to_point ? "send" : "all-reduce");
    }
    EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  }
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}

// The first send to a peer connects on the host: it returns once the peer has made its first receive
// from this rank; later sends do not wait on the host.
TEST(GpuSimNccl, FirstSendWaitsForThePeersFirstReceive) {
  const ncclComm_t world = world_comm();
  const Pair pair(world);
  if (pair.comm) {
    AbortAfter bound(pair.comm, 20);
    const Stream s;
    Buffer<int64_t> x(values<int64_t>(0, 10)), y(10);
    MPI_Barrier(pair.mpi);
    for (int round = 0; round < 2; ++round) {
      if (pair.rank == 0) {
        const auto start = Clock::now();
        EXPECT_EQ(ncclSend(x.p, 10, ncclInt64, 1, pair.comm, s.s), ncclSuccess);
        if (round == 0) {
          EXPECT_GT(seconds_since(start), 0.2) << "the first send did not wait for the first receive";
        } else {
          EXPECT_LT(seconds_since(start), 0.2) << "a send on a made connection waited on the host";
        }
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        EXPECT_EQ(ncclRecv(y.p, 10, ncclInt64, 0, pair.comm, s.s), ncclSuccess);
      }
    }
    ASSERT_EQ(cudaStreamSynchronize(s.s), cudaSuccess);
    if (pair.rank == 1) {
      EXPECT_EQ(y.read(), values<int64_t>(0, 10));
    }
    ASSERT_FALSE(bound.stop()) << "hung until aborted";
    EXPECT_EQ(ncclCommDestroy(pair.comm), ncclSuccess);
  }
  EXPECT_EQ(ncclCommDestroy(world), ncclSuccess);
}

// ---- where NCCL hangs ----

// A send to self outside a group never completes (its receive can only come after it): the stream
// hangs, which is no error, until ncclCommAbort releases it at once.
TEST(GpuSimNccl, HangSendToSelfOutsideAGroup) {
  const ncclComm_t comm = own_comm();
  const Stream s;
  Buffer<float> x(values<float>(0, 8)), y(std::vector<float>(8, 0.f));
  AbortAfter bound(comm, 10);
  ASSERT_EQ(ncclSend(x.p, 8, ncclFloat, 0, comm, s.s), ncclSuccess);
  ASSERT_EQ(ncclRecv(y.p, 8, ncclFloat, 0, comm, s.s), ncclSuccess);
  EXPECT_TRUE(stays_busy(s.s, 0.2)) << "a send to self completed outside a group";
  ncclResult_t async = ncclInternalError;
  EXPECT_EQ(ncclCommGetAsyncError(comm, &async), ncclSuccess);
  EXPECT_EQ(async, ncclSuccess) << "a hang is no error";
  ASSERT_FALSE(bound.stop());
  const auto start = Clock::now();
  EXPECT_EQ(ncclCommAbort(comm), ncclSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s.s), cudaSuccess);
  EXPECT_LT(seconds_since(start), 2.0);
  EXPECT_EQ(y.read(), std::vector<float>(8, 0.f)) << "the receive queued behind the hung send ran";
}

// NCCL's sends are synchronous: two ranks that both send first, each alone on its stream (connected
// before), deadlock. Rank 0 aborts: its stream is released at once, and the peer's operation fails
// with ncclRemoteError.
TEST(GpuSimNccl, HangBothRanksSendFirst) {
  const ncclComm_t world = world_comm();
  const Pair pair(world);
  if (pair.comm) {
    const Stream s;
    Buffer<float> x(values<float>(pair.rank, 16)), y(16);
    EXPECT_EQ(ncclGroupStart(), ncclSuccess);  // connects both directions
    EXPECT_EQ(ncclSend(x.p, 16, ncclFloat, pair.peer, pair.comm, s.s), ncclSuccess);
    EXPECT_EQ(ncclRecv(y.p, 16, ncclFloat, pair.peer, pair.comm, s.s), ncclSuccess);
    EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
    EXPECT_EQ(cudaStreamSynchronize(s.s), cudaSuccess);
    AbortAfter bound(pair.comm, 10);
    EXPECT_EQ(ncclSend(x.p, 16, ncclFloat, pair.peer, pair.comm, s.s), ncclSuccess);
    EXPECT_TRUE(stays_busy(s.s, 0.2)) << "a send completed without its receive";
    MPI_Barrier(pair.mpi);
    const auto start = Clock::now();
    if (pair.rank == 0) {
      ASSERT_FALSE(bound.stop());
      EXPECT_EQ(ncclCommAbort(pair.comm), ncclSuccess);
      EXPECT_EQ(cudaStreamSynchronize(s.s), cudaSuccess);
      EXPECT_LT(seconds_since(start), 2.0);
    } else {
      EXPECT_EQ(cudaStreamSynchronize(s.s), cudaSuccess);
      EXPECT_LT(seconds_since(start), 2.0) << "the peer's abort did not release this rank";
      ASSERT_FALSE(bound.stop()) << "released only by this rank's own abort";
      ncclResult_t async = ncclSuccess;
      EXPECT_EQ(ncclCommGetAsyncError(pair.comm, &async), ncclSuccess);
      EXPECT_EQ(async, ncclRemoteError);
      EXPECT_EQ(ncclCommDestroy(pair.comm), ncclSuccess);
    }
  }
  EXPECT_EQ(ncclCommDestroy(world), ncclSuccess);
}

// With a peer that never receives, the first send blocks the host in the connection until another
// thread aborts the communicator; then it fails, and the peer sees the abort as ncclRemoteError.
TEST(GpuSimNccl, HangConnectingToAPeerThatNeverReceives) {
  const ncclComm_t world = world_comm();
  const Pair pair(world);
  if (pair.comm) {
    const Stream s;
    Buffer<float> x(values<float>(0, 8));
    if (pair.rank == 0) {
      AbortAfter abort_later(pair.comm, 0.5);
      const auto start = Clock::now();
      EXPECT_NE(ncclSend(x.p, 8, ncclFloat, 1, pair.comm, s.s), ncclSuccess);
      const double took = seconds_since(start);
      EXPECT_GT(took, 0.4) << "ncclSend returned before the peer received";
      EXPECT_LT(took, 3.0);
      EXPECT_TRUE(abort_later.join());
      EXPECT_EQ(cudaStreamSynchronize(s.s), cudaSuccess);
    } else {
      AbortAfter bound(pair.comm, 10);
      EXPECT_EQ(async_error_within(pair.comm, 5.0), ncclRemoteError);
      if (!bound.stop()) {
        EXPECT_EQ(ncclCommDestroy(pair.comm), ncclSuccess);
      }
    }
  }
  EXPECT_EQ(ncclCommDestroy(world), ncclSuccess);
}

// A collective that one rank never joins hangs on the others until that rank aborts; they are then
// released with ncclRemoteError, their output untouched. Needs two ranks or more.
TEST(GpuSimNccl, HangCollectiveThatOneRankNeverJoins) {
  const int n = world_size(), me = world_rank();
  const ncclComm_t comm = world_comm();
  const Stream s;
  Buffer<float> x(values<float>(me, 8));
  if (n == 1) {
    EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  } else if (me != n - 1) {
    AbortAfter bound(comm, 10);
    EXPECT_EQ(ncclAllReduce(x.p, x.p, 8, ncclFloat, ncclSum, comm, s.s), ncclSuccess);
    EXPECT_TRUE(stays_busy(s.s, 0.2)) << "the all-reduce completed without rank " << n - 1;
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = Clock::now();
    EXPECT_EQ(cudaStreamSynchronize(s.s), cudaSuccess);
    EXPECT_LT(seconds_since(start), 2.0);
    ASSERT_FALSE(bound.stop()) << "released only by this rank's own abort";
    ncclResult_t async = ncclSuccess;
    EXPECT_EQ(ncclCommGetAsyncError(comm, &async), ncclSuccess);
    EXPECT_EQ(async, ncclRemoteError);
    EXPECT_EQ(x.read(), values<float>(me, 8)) << "the failed all-reduce wrote its output";
    EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  } else {
    MPI_Barrier(MPI_COMM_WORLD);
    EXPECT_EQ(ncclCommAbort(comm), ncclSuccess);
  }
}

}  // namespace
