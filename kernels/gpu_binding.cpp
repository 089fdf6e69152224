#include "gpu_binding.hpp"

#include <cstdlib>

#include <fmt/format.h>

#include "core/error.hpp"

namespace trident {

GpuChoice choose_gpu(int local_rank, int local_size, int visible, bool allow_sharing) {
  TRIDENT_CHECK(local_rank >= 0 && local_rank < local_size, "internal: local rank {} of {}", local_rank, local_size);
  if (visible <= 0)
    throw Error(fmt::format("runtime.backend = \"cuda\" but this rank sees no GPU ({}; no device or no driver)",
                            visible_devices_note()));
  // One visible GPU: the per-task binding gave each rank its own, or the node has one GPU. Which of
  // the two only the devices' UUIDs can tell; the caller compares them across the node.
  if (visible == 1) return GpuChoice{0, false};
  if (visible >= local_size) return GpuChoice{local_rank, false};
  if (!allow_sharing)
    throw Error(fmt::format("{} ranks on this node but only {} visible GPUs ({}): one rank per GPU with "
                            "runtime.comm = \"nccl\"; fewer ranks per node, or runtime.comm = \"mpi\" to share GPUs",
                            local_size, visible, visible_devices_note()));
  return GpuChoice{local_rank % visible, true};
}

std::string visible_devices_note() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  return v ? fmt::format("CUDA_VISIBLE_DEVICES={}", v) : std::string("CUDA_VISIBLE_DEVICES unset");
}

}  // namespace trident
