#include "app/backend_startup.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "comm/gpu_sharing.hpp"
#include "comm/watchdog.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

namespace trident {
namespace {

constexpr int kLoggedRanks = 64;

void log_backend_per_rank(ParallelMesh& mesh, const ComputeBackend& backend) {
  const auto lines = mesh.world().gather_strings_host(fmt::format(
      "rank {:4d} (node {}, local rank {}): {}", mesh.world_rank(), mesh.node().node, mesh.node().local_rank,
      backend.describe()));
  if (mesh.world_rank() != 0) return;
  const size_t shown = std::min(lines.size(), size_t(kLoggedRanks));
  std::string text;
  for (size_t r = 0; r < shown; ++r) text += "\n  " + lines[r];
  if (shown < lines.size()) text += fmt::format("\n  ... and {} more ranks", lines.size() - shown);
  log::info("compute backend per rank:{}", text);
}

}  // namespace

std::unique_ptr<ComputeBackend> start_backend_on(ParallelMesh& mesh, const Config& cfg) {
  const bool share_gpus = cfg.runtime.comm == Comm::Mpi;
  auto backend = start_backend(cfg.runtime.backend, mesh.node().local_rank, mesh.node().local_size, share_gpus);
  log_backend_per_rank(mesh, *backend);
  if (cfg.runtime.backend == Backend::Cuda)
    check_gpu_sharing(mesh.world().mpi_comm(), mesh.node(), backend->device_uuid(), share_gpus);
  {
    const watchdog::Watch watch("NCCL communicator set-up", cfg.runtime.collective_timeout_s);
    mesh.connect_tensors(cfg.runtime.comm, backend->kernels());
  }
  log::info("tensor communication: {}", to_string(mesh.tensor_transport()));
  return backend;
}

std::unique_ptr<ParallelMesh> make_mesh(const Config& cfg) {
  const watchdog::Watch watch("communicator set-up", cfg.runtime.collective_timeout_s);
  return std::make_unique<ParallelMesh>(MPI_COMM_WORLD, cfg.mesh, cfg.runtime.mpi_wait);
}

std::string model_checkpoint(const std::string& given, const Config& cfg, const char* verb) {
  const std::string where = !given.empty() ? given : cfg.checkpoint.dir;
  if (!where.empty()) return resolve_checkpoint(where);  // throws naming the directory when it holds none
  if (!cfg.model.init_from.empty()) return "";
  throw Error(fmt::format("{}: nothing to {}: no --checkpoint, no [checkpoint] dir and no [model] init_from", cfg.source,
                          verb));
}

}  // namespace trident
