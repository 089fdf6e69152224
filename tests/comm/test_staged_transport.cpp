// Host staging (TensorTransport::Staged, runtime.comm = "mpi" on a GPU) without a GPU: the "device"
// is host memory that the copies encode (every byte XOR 0x5A), so an operation that handed MPI the
// device buffer instead of its staged copy, or forgot a copy in or out, gives wrong values. Every
// tensor operation of Group is checked against values computed here from the ranks' inputs, with the
// copies counted; and the staging pool on its own. The real CUDA copies run in the gpu suites.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

#include "comm/group.hpp"
#include "comm/staging.hpp"
#include "common/test_support.hpp"
#include "core/error.hpp"

namespace trident::test {
namespace {

constexpr unsigned char kKey = 0x5A;

struct CopyStats {
  int to_host = 0, to_device = 0, allocations = 0, frees = 0;
  int64_t bytes_to_host = 0, bytes_to_device = 0;
};

// "Device" memory holds every byte XOR kKey; the copies decode and encode.
class XorCopies final : public DeviceCopies {
 public:
  explicit XorCopies(CopyStats* stats) : stats_(stats) {}
  void* alloc_host(int64_t bytes) override {
    ++stats_->allocations;
    return std::malloc(size_t(bytes));
  }
  void free_host(void* p) override {
    ++stats_->frees;
    std::free(p);
  }
  void to_host(void* host, const void* device, int64_t bytes) override {
    ++stats_->to_host;
    stats_->bytes_to_host += bytes;
    xor_copy(host, device, bytes);
  }
  void to_device(void* device, const void* host, int64_t bytes) override {
    ++stats_->to_device;
    stats_->bytes_to_device += bytes;
    xor_copy(device, host, bytes);
  }

 private:
  static void xor_copy(void* dst, const void* src, int64_t bytes) {
    auto* d = static_cast<unsigned char*>(dst);
    const auto* s = static_cast<const unsigned char*>(src);
    for (int64_t i = 0; i < bytes; ++i) d[i] = s[i] ^ kKey;
  }
  CopyStats* stats_;
};

// A tensor in the fake device memory.
template <class T> struct DeviceVector {
  std::vector<unsigned char> bytes;
  explicit DeviceVector(const std::vector<T>& values) : bytes(values.size() * sizeof(T)) { set(values); }
  void set(const std::vector<T>& values) {
    std::memcpy(bytes.data(), values.data(), bytes.size());
    for (auto& b : bytes) b ^= kKey;
  }
  std::vector<T> get() const {
    std::vector<unsigned char> plain(bytes);
    for (auto& b : plain) b ^= kKey;
    std::vector<T> v(bytes.size() / sizeof(T));
    std::memcpy(v.data(), plain.data(), plain.size());
    return v;
  }
  T* data() { return reinterpret_cast<T*>(bytes.data()); }
};

std::vector<int> all_ranks() {
  std::vector<int> r(static_cast<size_t>(world_size()));
  std::iota(r.begin(), r.end(), 0);
  return r;
}

struct StagedGroup {
  CopyStats stats;
  Group group;
  explicit StagedGroup(MpiWait wait = MpiWait::Block) : group("staged", dup(), all_ranks(), wait) {
    group.use_staging(std::make_unique<XorCopies>(&stats));
  }
  static MPI_Comm dup() {
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    return c;
  }
};

// Rank r's element i.
float value(int r, int64_t i) { return float(r + 1) * 0.5f + float(i % 13); }

std::vector<float> inputs(int r, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = value(r, i);
  return v;
}

// Sum over the ranks of value(r, i), in rank order as a reference (exact: small integers and halves).
float sum_over_ranks(int64_t i) {
  float s = 0;
  for (int r = 0; r < world_size(); ++r) s += value(r, i);
  return s;
}

TEST(StagedTransport, AllReduceSumAndMaxGoThroughTheStagedCopy) {
  StagedGroup g;
  ASSERT_EQ(g.group.transport(), TensorTransport::Staged);
  const int64_t n = 1000;
  DeviceVector<float> x(inputs(world_rank(), n));
  g.group.all_reduce(x.data(), n);
  const auto got = x.get();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[size_t(i)], sum_over_ranks(i)) << i;
  DeviceVector<double> m(std::vector<double>(5, double(world_rank())));
  g.group.all_reduce(m.data(), 5, ReduceOp::Max);
  for (double v : m.get()) EXPECT_EQ(v, double(world_size() - 1));
  if (world_size() == 1) {  // a group of one moves nothing and copies nothing
    EXPECT_EQ(g.stats.to_host + g.stats.to_device, 0);
    return;
  }
  EXPECT_EQ(g.stats.to_host, 2);
  EXPECT_EQ(g.stats.to_device, 2);
  EXPECT_EQ(g.stats.bytes_to_host, n * 4 + 5 * 8);
}

TEST(StagedTransport, ReduceScatterAndAllGather) {
  StagedGroup g;
  const int p = world_size(), me = world_rank();
  const int64_t block = 37;
  DeviceVector<float> send(inputs(me, block * p));
  DeviceVector<float> recv(std::vector<float>(size_t(block), -1.f));
  g.group.reduce_scatter(send.data(), recv.data(), block);
  const auto got = recv.get();
  for (int64_t i = 0; i < block; ++i) ASSERT_EQ(got[size_t(i)], sum_over_ranks(me * block + i)) << i;

  DeviceVector<int64_t> mine(std::vector<int64_t>{me * 10, me * 10 + 1});
  DeviceVector<int64_t> all(std::vector<int64_t>(size_t(2 * p), -1));
  g.group.all_gather(mine.data(), all.data(), 2);
  const auto gathered = all.get();
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(gathered[size_t(2 * r)], r * 10);
    EXPECT_EQ(gathered[size_t(2 * r + 1)], r * 10 + 1);
  }
}

TEST(StagedTransport, BroadcastFromEveryRoot) {
  StagedGroup g;
  for (int root = 0; root < world_size(); ++root) {
    DeviceVector<int32_t> x(std::vector<int32_t>(9, world_rank() == root ? 100 + root : -7));
    g.group.broadcast(x.data(), 9, root);
    for (int32_t v : x.get()) ASSERT_EQ(v, 100 + root) << "root " << root;
  }
}

// A ring: every rank sends to its right and receives from its left, both outstanding at once.
TEST(StagedTransport, NonBlockingSendAndReceive) {
  StagedGroup g;
  const int p = world_size(), me = world_rank();
  if (p == 1) TRIDENT_SKIP_NOT_APPLICABLE("a ring needs two ranks");
  const int64_t n = 3000;
  DeviceVector<float> out(inputs(me, n)), in(std::vector<float>(size_t(n), 0.f));
  Request recv = g.group.irecv(in.data(), n, (me + p - 1) % p, 5);
  Request send = g.group.isend(out.data(), n, (me + 1) % p, 5);
  std::vector<Request> both = {recv, send};
  g.group.wait_all(both);
  EXPECT_EQ(in.get(), inputs((me + p - 1) % p, n));
  EXPECT_EQ(out.get(), inputs(me, n));  // a send copies nothing back
  EXPECT_EQ(g.stats.to_host, 1);
  EXPECT_EQ(g.stats.to_device, 1);
}

// Several reductions in flight at once each keep their own staging buffer.
TEST(StagedTransport, OverlappingAllReducesKeepTheirOwnBuffers) {
  StagedGroup g;
  const int k = 4;
  const int64_t n = 500;
  std::vector<DeviceVector<float>> xs;
  for (int j = 0; j < k; ++j) {
    auto v = inputs(world_rank(), n);
    for (auto& e : v) e += float(100 * j);
    xs.emplace_back(v);
  }
  std::vector<Request> rs;
  for (auto& x : xs) rs.push_back(g.group.iall_reduce(x.data(), n));
  g.group.wait_all(rs);
  for (int j = 0; j < k; ++j) {
    const auto got = xs[size_t(j)].get();
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(got[size_t(i)], sum_over_ranks(i) + float(100 * j * world_size())) << "request " << j << " at " << i;
  }
}

// ZeRO-2's reduce to the owner: only the root's data changes; test() finishes a request too.
TEST(StagedTransport, ReduceToEachRootAndTestCompletes) {
  StagedGroup g;
  const int64_t n = 64;
  for (int root = 0; root < world_size(); ++root) {
    DeviceVector<float> x(inputs(world_rank(), n));
    Request r = g.group.ireduce(x.data(), n, root);
    while (!g.group.test(r)) {
    }
    EXPECT_EQ(r.transfer, -1);
    const auto got = x.get();
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(got[size_t(i)], world_rank() == root ? sum_over_ranks(i) : value(world_rank(), i))
          << "root " << root << " element " << i;
  }
}

// ZeRO's shard broadcast from its owner, non-blocking.
TEST(StagedTransport, NonBlockingBroadcast) {
  StagedGroup g(MpiWait::Poll);
  const int root = world_size() - 1;
  DeviceVector<double> x(std::vector<double>(17, world_rank() == root ? 2.5 : 0.0));
  Request r = g.group.ibroadcast(x.data(), 17, root);
  g.group.wait(r);
  for (double v : x.get()) EXPECT_EQ(v, 2.5);
}

// Host values never go through the staging, whatever the transport.
TEST(StagedTransport, HostValuesBypassTheStaging) {
  StagedGroup g;
  double loss = 1.0 + world_rank();
  g.group.all_reduce_host(&loss, 1);
  EXPECT_EQ(loss, world_size() * (world_size() + 1) / 2.0);
  EXPECT_EQ(g.stats.to_host + g.stats.to_device, 0);
}

TEST(StagedTransport, CountsTheSameBytesAsTheHostTransport) {
  StagedGroup staged;
  Group host("host", StagedGroup::dup(), all_ranks(), MpiWait::Block);
  const int64_t n = 128;
  for (Group* g : {&staged.group, &host}) {
    DeviceVector<float> a(inputs(world_rank(), n));
    std::vector<float> plain = inputs(world_rank(), n);
    float* data = g == &host ? plain.data() : a.data();
    g->all_reduce(data, n);
    g->broadcast(data, n, 0);
  }
  EXPECT_EQ(staged.group.counters().bytes, host.counters().bytes);
  EXPECT_EQ(staged.group.counters().calls, host.counters().calls);
}

TEST(StagedTransport, TheTransportIsSetOnce) {
  StagedGroup g;
  EXPECT_THROW(g.group.use_staging(std::make_unique<XorCopies>(&g.stats)), Error);
}

// ---- the pool on its own (one rank is enough) ----

TEST(HostStaging, ReusesFreedBuffersAndCopiesOnlyWhatIsAskedFor) {
  if (world_rank() != 0) TRIDENT_SKIP_NOT_APPLICABLE("local to one rank");
  CopyStats stats;
  {
    HostStaging pool(std::make_unique<XorCopies>(&stats));
    std::vector<unsigned char> device(100000);
    unsigned char* dev = device.data();
    const int a = pool.begin(dev, nullptr, 1000);     // copy in only (a send): a 64 KiB buffer
    const int b = pool.begin(nullptr, dev, 100000);   // copy back only (a receive): 128 KiB
    EXPECT_NE(a, b);
    EXPECT_EQ(pool.in_flight(), 2);
    EXPECT_EQ(stats.to_host, 1);
    pool.finish(a);
    pool.finish(b);
    EXPECT_EQ(stats.to_device, 1);
    EXPECT_EQ(stats.bytes_to_device, 100000);
    EXPECT_EQ(pool.in_flight(), 0);
    // Later requests take the buffers already held, the smallest that fits: no new allocation.
    const int allocations = stats.allocations;
    const int d = pool.begin(dev, dev, 70000);  // only the 128 KiB one fits
    const int c = pool.begin(dev, nullptr, 900);
    EXPECT_EQ(d, b);
    EXPECT_EQ(c, a);
    EXPECT_EQ(stats.allocations, allocations);
    pool.finish(c);
    pool.finish(d);
    EXPECT_THROW(pool.finish(d), Error);  // finished twice
    EXPECT_EQ(pool.host_bytes(), 65536 + 131072);
  }
  EXPECT_EQ(stats.frees, stats.allocations);
}

}  // namespace
}  // namespace trident::test
