// Tensor communication on GPU buffers, through both transports a CUDA run can choose:
//   * comm = "mpi" (host-staged): every Group operation at 1 and 2 ranks, with the ranks sharing the
//     machine's GPU (what NCCL refuses), values checked against sums computed here;
//   * comm = "nccl": every collective and the grouped send/receive at one rank per GPU. A group of one
//     rank goes through NCCL too (reduce-scatter, all-gather and the send to itself would leave the
//     output untouched if it were skipped). Where two or more GPUs exist the same checks run across
//     ranks; elsewhere that case skips with a message.
// Each result is read back with the compute queue's own copy, so it also checks that the operation is
// ordered before the compute stream's later work (events, not a device-wide synchronisation).
// A watchdog runs as in `trident train`: an operation that never completes (a call order that
// deadlocks NCCL) ends the job within 60 s, naming it. Skips without a CUDA build or without a GPU.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <vector>

#include "backend.hpp"
#include "comm/mesh.hpp"
#include "comm/watchdog.hpp"
#include "common/test_support.hpp"

#if TRIDENT_HAVE_CUDA
#include "cuda/device.hpp"
#endif

namespace trident::test {
namespace {

int gpus() {
#if TRIDENT_HAVE_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

#define TRIDENT_REQUIRE_GPU()                                                                         \
  do {                                                                                                \
    if (gpus() == 0) GTEST_SKIP() << "no CUDA device (or a build without CUDA): GPU communication needs one"; \
  } while (0)

class WatchdogEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { monitor_ = std::make_unique<watchdog::Monitor>(60.0, 0.0); }
  void TearDown() override { monitor_.reset(); }

 private:
  std::unique_ptr<watchdog::Monitor> monitor_;
};
[[maybe_unused]] const ::testing::Environment* const kWatchdog =
    ::testing::AddGlobalTestEnvironment(new WatchdogEnvironment);

float value(int r, int64_t i) { return float(r + 1) + float(i % 11) * 0.25f; }

float sum_over_ranks(int64_t i) {
  float s = 0;
  for (int r = 0; r < world_size(); ++r) s += value(r, i);
  return s;
}

// One process's backend and a mesh whose pipeline group is the whole world (the group that gets NCCL
// point-to-point channels), connected with `comm`.
struct GpuGroup {
  std::unique_ptr<ComputeBackend> backend;
  std::unique_ptr<ParallelMesh> mesh;
  Kernels& k() { return backend->kernels(); }
  Group& group() { return mesh->pp(); }

  explicit GpuGroup(Comm comm) {
    MeshConfig m;
    m.pp = world_size();
    mesh = std::make_unique<ParallelMesh>(MPI_COMM_WORLD, m, MpiWait::Block);
    backend = start_backend(Backend::Cuda, mesh->node().local_rank, mesh->node().local_size, comm == Comm::Mpi);
    mesh->connect_tensors(comm, backend->kernels());
  }
  float* upload(const std::vector<float>& host) {
    float* d = k().alloc(int64_t(host.size()));
    k().copy_to_device(d, host.data(), int64_t(host.size()));
    return d;
  }
  std::vector<float> download(const float* d, int64_t n) {
    std::vector<float> host(static_cast<size_t>(n));
    k().copy_to_host(host.data(), d, n);
    return host;
  }
};

std::vector<float> inputs(int r, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = value(r, i);
  return v;
}

// Every tensor operation of Group on device buffers; expected values are computed from the inputs.
void check_every_operation(GpuGroup& s) {
  Group& g = s.group();
  const int p = g.size(), me = g.rank();
  const int64_t n = 1 << 14;

  float* x = s.upload(inputs(me, n));
  g.all_reduce(x, n);
  auto got = s.download(x, n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[size_t(i)], sum_over_ranks(i)) << "all_reduce at " << i;

  float* m = s.upload(std::vector<float>(64, float(me)));
  g.all_reduce(m, 64, ReduceOp::Max);
  for (float v : s.download(m, 64)) ASSERT_EQ(v, float(p - 1)) << "all_reduce max";

  const int64_t block = 1000;
  float* send = s.upload(inputs(me, block * p));
  float* recv = s.upload(std::vector<float>(size_t(block), -1.f));
  g.reduce_scatter(send, recv, block);
  got = s.download(recv, block);
  for (int64_t i = 0; i < block; ++i) ASSERT_EQ(got[size_t(i)], sum_over_ranks(me * block + i)) << "reduce_scatter";

  float* all = s.upload(std::vector<float>(size_t(block * p), -1.f));
  float* mine = s.upload(inputs(me, block));
  g.all_gather(mine, all, block);
  got = s.download(all, block * p);
  for (int r = 0; r < p; ++r)
    for (int64_t i = 0; i < block; ++i) ASSERT_EQ(got[size_t(r * block + i)], value(r, i)) << "all_gather";

  for (int root = 0; root < p; ++root) {
    float* b = s.upload(std::vector<float>(100, me == root ? 7.f + float(root) : 0.f));
    Request r = g.ibroadcast(b, 100, root);
    g.wait(r);
    for (float v : s.download(b, 100)) ASSERT_EQ(v, 7.f + float(root)) << "broadcast from " << root;
    float* z = s.upload(inputs(me, 300));
    Request q = g.ireduce(z, 300, root);
    g.wait(q);
    got = s.download(z, 300);
    if (me == root) {
      for (int64_t i = 0; i < 300; ++i) ASSERT_EQ(got[size_t(i)], sum_over_ranks(i)) << "reduce to " << root;
    }
    s.k().free(b);
    s.k().free(z);
  }

  // The pipeline's pattern: a receive posted ahead, then a send, then both waited for (to itself at
  // one rank, as one NCCL group; a ring otherwise, on the channels). On one stream NCCL would deadlock.
  float* out = s.upload(inputs(me, n));
  float* in = s.upload(std::vector<float>(size_t(n), 0.f));
  const int left = (me + p - 1) % p, right = (me + 1) % p;
  std::vector<Request> both = {g.irecv(in, n, left, 0), g.isend(out, n, right, 0)};
  g.wait_all(both);
  EXPECT_EQ(s.download(in, n), inputs(left, n)) << "send/recv";

  for (float* d : {x, m, send, recv, all, mine, out, in}) s.k().free(d);
}

TEST(GpuComm, EveryTensorOperationOverHostStagedMpi) {
  TRIDENT_REQUIRE_GPU();
  GpuGroup s(Comm::Mpi);
  ASSERT_EQ(s.group().transport(), TensorTransport::Staged);
  check_every_operation(s);
}

TEST(GpuComm, EveryTensorOperationOverNccl) {
  TRIDENT_REQUIRE_GPU();
  if (world_size() > gpus())
    GTEST_SKIP() << world_size() << " ranks but " << gpus()
                 << " GPU(s) here: NCCL needs one GPU per rank (the 1-rank entry checks NCCL itself)";
  GpuGroup s(Comm::Nccl);
  ASSERT_EQ(s.group().transport(), TensorTransport::Nccl);
  check_every_operation(s);
}

// Several reductions in flight at once (the DP buckets) complete independently and in any wait order.
TEST(GpuComm, OverlappingReductionsOverNccl) {
  TRIDENT_REQUIRE_GPU();
  if (world_size() > gpus()) GTEST_SKIP() << "NCCL needs one GPU per rank";
  GpuGroup s(Comm::Nccl);
  Group& g = s.group();
  const int64_t n = 4096;
  std::vector<float*> xs;
  std::vector<Request> rs;
  for (int j = 0; j < 6; ++j) {
    auto v = inputs(g.rank(), n);
    for (auto& e : v) e += float(j);
    xs.push_back(s.upload(v));
    rs.push_back(g.iall_reduce(xs.back(), n));
  }
  for (int j = 5; j >= 0; --j) g.wait(rs[size_t(j)]);
  for (int j = 0; j < 6; ++j) {
    const auto got = s.download(xs[size_t(j)], n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[size_t(i)], sum_over_ranks(i) + float(j * g.size())) << j;
    s.k().free(xs[size_t(j)]);
  }
}

}  // namespace
}  // namespace trident::test
