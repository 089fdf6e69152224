// `trident ckpt ...`: the checkpoint tools.
#include "app/commands.hpp"
#include "core/error.hpp"

namespace trident {

void add_ckpt_command(CLI::App& app) {
  auto* ckpt = app.add_subcommand("ckpt", "Checkpoint tools: list, inspect, verify, export");
  ckpt->allow_extras();
  ckpt->callback([] { throw NotImplemented("`trident ckpt` (sharded HDF5 checkpoints are not built yet)"); });
}

}  // namespace trident
