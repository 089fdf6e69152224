// `trident train`.
#include <mpi.h>

#include "app/commands.hpp"
#include "backend.hpp"
#include "comm/mesh.hpp"
#include "core/log.hpp"
#include "train/preflight.hpp"
#include "train/trainer.hpp"

namespace trident {

int run_train(const DeckArgs& args) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const Config cfg = load_deck_logged(args, DeckOptions{world});
  check_supported(cfg);  // before the backend starts: `check` refuses the same, in the same order
  log::info("trident train {} (tp {} x pp {} x dp {}, {} ranks)", cfg.source, cfg.mesh.tp, cfg.mesh.pp, cfg.mesh.dp,
            world);
  ParallelMesh mesh(MPI_COMM_WORLD, cfg.mesh, cfg.runtime.mpi_wait);
  const auto backend = start_backend(cfg.runtime.backend, mesh.node().local_rank, mesh.node().local_size);
  log::info("compute backend: {}", backend->describe());
  Trainer trainer(cfg, backend->kernels(), &mesh);
  trainer.run();
  return 0;
}

}  // namespace trident
