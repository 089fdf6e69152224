#include "comm/gpu_sharing.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"

namespace trident {
namespace {

// One rank's entry of the all-gather: its node and its GPU's UUID, fixed-size for MPI.
struct GpuEntry {
  int node = 0;
  std::array<char, 64> uuid{};
};

}  // namespace

void check_gpu_sharing(MPI_Comm world, const NodeInfo& node, const std::string& gpu_uuid, bool allow_sharing) {
  int size = 1;
  MPI_Comm_size(world, &size);
  GpuEntry mine;
  mine.node = node.node;
  TRIDENT_CHECK(gpu_uuid.size() < mine.uuid.size(), "internal: GPU UUID '{}' too long", gpu_uuid);
  std::memcpy(mine.uuid.data(), gpu_uuid.data(), gpu_uuid.size());
  std::vector<GpuEntry> all(static_cast<size_t>(size));
  MPI_Allgather(&mine, int(sizeof mine), MPI_BYTE, all.data(), int(sizeof mine), MPI_BYTE, world);
  if (allow_sharing) return;
  // Every rank looks at the same table, so every rank reaches the same verdict and message.
  for (int a = 0; a < size; ++a) {
    for (int b = a + 1; b < size; ++b) {
      if (all[size_t(a)].node != all[size_t(b)].node || all[size_t(a)].uuid != all[size_t(b)].uuid) continue;
      throw Error(fmt::format("ranks {} and {} on node {} both use GPU {}: one rank per GPU with runtime.comm = "
                              "\"nccl\" (NCCL cannot run two ranks on one device); give each task its own GPU "
                              "(srun --gpus-per-task=1, or as many visible GPUs as tasks per node), or set "
                              "runtime.comm = \"mpi\" (host-staged, slower) to share",
                              a, b, all[size_t(a)].node, all[size_t(a)].uuid.data()));
    }
  }
}

}  // namespace trident
