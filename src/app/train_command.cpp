// `trident train`.
#include <mpi.h>

#include <memory>

#include "app/backend_startup.hpp"
#include "app/commands.hpp"
#include "app/memory_check.hpp"
#include "app/slurm_startup.hpp"
#include "comm/mesh.hpp"
#include "comm/watchdog.hpp"
#include "core/log.hpp"
#include "core/log_streams.hpp"
#include "train/preflight.hpp"
#include "train/trainer.hpp"

namespace trident {
namespace {

constexpr int kTopologyLogRanks = 64;

}  // namespace

int run_train(const DeckArgs& args) {
  log::use_job_log_streams();  // the log is train's output: information on stdout, problems on stderr
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  check_mpi_matches_slurm(world);
  const Config cfg = load_deck_logged(args, DeckOptions{world});
  check_supported(cfg);  // before the backend starts: `check` refuses the same, in the same order
  log::info("trident train {} (tp {} x pp {} x dp {}, {} ranks)", cfg.source, cfg.mesh.tp, cfg.mesh.pp, cfg.mesh.dp,
            world);
  log_slurm_job(cfg);
  const watchdog::Monitor monitor(cfg.runtime.collective_timeout_s, cfg.runtime.checkpoint_timeout_s);
  const auto mesh = make_mesh(cfg);
  // Where every rank runs (hosts, nodes, groups); one line per rank, so only for modest worlds.
  const std::string topology = world <= kTopologyLogRanks ? mesh->describe() : "";
  if (!topology.empty()) log::info("topology:\n{}", topology.substr(0, topology.size() - 1));
  check_memory_fits(cfg, mesh->node().local_size);
  const auto backend = start_backend_on(*mesh, cfg);
  Trainer trainer(cfg, backend->kernels(), mesh.get());
  trainer.run();
  return trainer.exit_code();
}

}  // namespace trident
