// NCCL communicators mirroring the MPI groups: an all-reduce on device buffers in every group gives
// the same answer as the MPI one. Skips without a CUDA build or without a GPU.
#include <gtest/gtest.h>

#include <vector>

#include "comm/mesh.hpp"
#include "common/test_support.hpp"

#if TRIDENT_HAVE_CUDA
#include <cuda_runtime.h>

#include "cuda/device.hpp"
#endif

namespace trident::test {
namespace {

TEST(NcclGroups, AllReduceOnDeviceBuffersMatchesMpi) {
#if !TRIDENT_HAVE_CUDA
  GTEST_SKIP() << "CPU build: no CUDA backend";
#else
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  MeshConfig m;
  m.tp = world_size();
  ParallelMesh mesh(MPI_COMM_WORLD, m, MpiWait::Block);
  mesh.attach_nccl();
  ASSERT_TRUE(mesh.tp().has_nccl());
  const int n = 1 << 16;
  std::vector<float> host(n);
  for (int i = 0; i < n; ++i) host[i] = float(world_rank() + 1) * float(i % 7);
  float* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dev, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  mesh.tp().all_reduce(dev, n);
  Request r;
  mesh.tp().wait(r);  // synchronises the group's NCCL stream
  std::vector<float> out(n);
  ASSERT_EQ(cudaMemcpy(out.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  const int size = world_size();
  const float ranks_sum = float(size * (size + 1) / 2);
  for (int i = 0; i < n; ++i) ASSERT_EQ(out[i], ranks_sum * float(i % 7)) << "element " << i;
  cudaFree(dev);
#endif
}

}  // namespace
}  // namespace trident::test
