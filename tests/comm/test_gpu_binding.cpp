// Which GPU a rank takes (kernels/gpu_binding.hpp) and the refusal of two ranks of a node on one GPU
// (comm/gpu_sharing.hpp), with fake device counts and fake UUIDs: no GPU is needed. The expected
// choices are written from the cases Slurm and mpiexec produce, not from the code.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <string>

#include "comm/gpu_sharing.hpp"
#include "common/test_support.hpp"
#include "core/error.hpp"
#include "gpu_binding.hpp"

namespace trident {
namespace {

using ::testing::HasSubstr;
using test::world_rank;
using test::world_size;

std::string refusal(int local_rank, int local_size, int visible, bool allow_sharing) {
  try {
    choose_gpu(local_rank, local_size, visible, allow_sharing);
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(ChooseGpu, AllOfANodesGpusVisibleGivesLocalRankR_GpuR) {
  // mpiexec -n 4 on a 4-GPU node, CUDA_VISIBLE_DEVICES unset.
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(choose_gpu(r, 4, 4, false).index, r);
    EXPECT_FALSE(choose_gpu(r, 4, 4, false).shared);
  }
  // Two ranks on an 8-GPU node take the first two.
  EXPECT_EQ(choose_gpu(1, 2, 8, false).index, 1);
}

TEST(ChooseGpu, OneVisibleGpuPerTaskIsGpuZeroForEveryRank) {
  // srun --gpus-per-task=1: each of the 4 tasks sees only its own GPU, as device 0. (Before, local
  // rank 3 asked for device 3 and failed.)
  for (int r = 0; r < 4; ++r) EXPECT_EQ(choose_gpu(r, 4, 1, false).index, 0);
}

TEST(ChooseGpu, FewerGpusThanRanksIsRefusedUnlessSharingIsAllowed) {
  const std::string message = refusal(2, 4, 2, false);
  EXPECT_THAT(message, HasSubstr("4 ranks on this node but only 2 visible GPUs"));
  EXPECT_THAT(message, HasSubstr("or runtime.comm = \"mpi\" to share GPUs"));
  EXPECT_EQ(choose_gpu(2, 4, 2, true).index, 0);
  EXPECT_EQ(choose_gpu(3, 4, 2, true).index, 1);
  EXPECT_TRUE(choose_gpu(3, 4, 2, true).shared);
}

TEST(ChooseGpu, NoVisibleGpuNamesCudaVisibleDevices) {
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
  EXPECT_THAT(refusal(0, 1, 0, false), HasSubstr("sees no GPU (CUDA_VISIBLE_DEVICES=;"));
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_THAT(refusal(0, 1, 0, false), HasSubstr("CUDA_VISIBLE_DEVICES unset"));
}

// The sharing check is collective: every rank must reach the same verdict.
std::string sharing_refusal(const NodeInfo& node, const std::string& uuid, bool allow) {
  try {
    check_gpu_sharing(MPI_COMM_WORLD, node, uuid, allow);
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(GpuSharing, DistinctGpusPass) {
  const NodeInfo node{0, 1, world_rank(), world_size()};
  EXPECT_EQ(sharing_refusal(node, "GPU-" + std::to_string(world_rank()), false), "(accepted)");
}

TEST(GpuSharing, TwoRanksOfANodeOnOneGpuAreRefusedOnEveryRank) {
  if (world_size() < 2) GTEST_SKIP() << "not applicable: needs 2 ranks";
  // Ranks 0 and 1 see the same device (a node with one GPU and per-task binding that gives both
  // "GPU 0"); the others have their own.
  const int r = world_rank();
  const std::string uuid = r <= 1 ? "GPU-shared" : "GPU-" + std::to_string(r);
  const NodeInfo node{0, 1, r, world_size()};
  const std::string message = sharing_refusal(node, uuid, false);
  EXPECT_THAT(message, HasSubstr("ranks 0 and 1 on node 0 both use GPU GPU-shared"));
  EXPECT_EQ(sharing_refusal(node, uuid, true), "(accepted)");
}

TEST(GpuSharing, TheSameIndexOnDifferentNodesIsNotSharing) {
  if (world_size() < 2) GTEST_SKIP() << "not applicable: needs 2 ranks";
  // One rank per (fake) node, each with its node's GPU 0, reported under one name.
  const NodeInfo node{world_rank(), world_size(), 0, 1};
  EXPECT_EQ(sharing_refusal(node, "GPU-0", false), "(accepted)");
}

}  // namespace
}  // namespace trident
