// `trident check` and `trident topology`.
#include <fmt/format.h>
#include <mpi.h>

#include <iostream>

#include "app/commands.hpp"
#include "app/memory_check.hpp"
#include "app/slurm_startup.hpp"
#include "app/backend_startup.hpp"
#include "comm/layout_text.hpp"
#include "comm/mesh.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "planner/plan_command.hpp"
#include "train/preflight.hpp"

namespace trident {
namespace {

std::string gb(double bytes) { return fmt::format("{:.2f} GB", bytes / 1e9); }
std::string limit_text(double s) { return s > 0 ? fmt::format("{:g} s", s) : std::string("off"); }

// `topology --ranks N`: the layout of a launch on N ranks, from the deck alone (nothing started).
int preview_topology(const TopologyArgs& args, int world) {
  if (world > 1 && world != args.ranks)
    throw Error(fmt::format("topology --ranks {} previews a launch without making it, but this job has {} ranks: run "
                            "it as one process, or drop --ranks to see this job's layout",
                            args.ranks, world));
  const Config cfg = load_deck_logged(args, DeckOptions{args.ranks});
  if (log::is_root()) std::cout << describe_layout_preview(MeshLayout(cfg.mesh)) << std::flush;
  return 0;
}

}  // namespace

Config load_deck_logged(const DeckArgs& args, const DeckOptions& options) {
  Config cfg = load_deck(args.deck, args.overrides, options);
  for (const auto& w : cfg.warnings) log::root_warn("{}", w);  // every rank loads the deck: said once
  return cfg;
}

int run_check(const CheckArgs& args) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const int ranks = args.ranks > 0 ? args.ranks : (world > 1 ? world : 0);
  const Config cfg = load_deck_logged(args, DeckOptions{ranks});
  if (!args.deck_only) check_trainable(cfg);  // the same refusals, with the same messages, as `train`
  if (!log::is_root()) return 0;
  const auto& m = cfg.model;
  std::cout << "# resolved configuration of " << cfg.source << "\n" << cfg.resolved_toml;
  std::cout << fmt::format(
      "# derived\n"
      "parameters           {} ({:.3f} B)\n"
      "tokens per step      {}\n"
      "micro-batches/step   {} per DP rank (micro_batch {} x dp {})\n"
      "ranks needed         {} (tp {} x pp {} x dp {})\n"
      "head dim             {}\n",
      parameter_count(m), parameter_count(m) / 1e9, cfg.tokens_per_step(), cfg.micro_batches_per_step(),
      cfg.train.micro_batch, cfg.mesh.dp, cfg.mesh.world_size(), cfg.mesh.tp, cfg.mesh.pp, cfg.mesh.dp, m.head_dim());
  std::cout << planner::check_memory_report(cfg);
  std::cout << fmt::format("train's memory check (runtime.memory_check = {}): {} per rank needed; {} available on "
                           "this machine, shared by its ranks\n",
                           cfg.runtime.memory_check, gb(estimated_rank_bytes(cfg)), gb(available_node_bytes()));
  std::cout << fmt::format("watchdog: collectives {}, checkpoint writes {}\n",
                           limit_text(cfg.runtime.collective_timeout_s), limit_text(cfg.runtime.checkpoint_timeout_s));
  if (args.deck_only) {
    std::cout << "deck valid (--deck-only: data and build features not checked)\n";
  } else if (ranks == 0) {
    std::cout << fmt::format("deck OK: `train` starts when launched on {} rank(s) (check with --ranks N)\n",
                             cfg.mesh.world_size());
  } else {
    std::cout << fmt::format("deck OK on {} rank(s)\n", ranks);
  }
  return 0;
}

int run_topology(const TopologyArgs& args) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (args.ranks > 0) return preview_topology(args, world);
  check_mpi_matches_slurm(world);
  const Config cfg = load_deck_logged(args, DeckOptions{world});
  ParallelMesh mesh(MPI_COMM_WORLD, cfg.mesh, cfg.runtime.mpi_wait);
  // As `train` starts: GPUs bound, every group's tensor transport made (NCCL communicators created).
  const auto backend = start_backend_on(mesh, cfg);
  const std::string text = mesh.describe();
  if (mesh.world_rank() == 0) {
    std::cout << text;
    std::cout << "tensor communication: " << to_string(mesh.tensor_transport()) << "\n";
    std::cout << std::flush;
  }
  return 0;
}

}  // namespace trident
