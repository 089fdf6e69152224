// `trident eval`: the loss and perplexity of a trained model over a whole dataset, on the layout the deck
// gives (any tp x pp x dp: the checkpoint is resharded as a resumed run would be).
#include <fmt/format.h>
#include <mpi.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <memory>

#include "app/backend_startup.hpp"
#include "app/commands.hpp"
#include "app/memory_check.hpp"
#include "checkpoint/checkpoint.hpp"
#include "comm/mesh.hpp"
#include "comm/watchdog.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/log_streams.hpp"
#include "core/output_file.hpp"
#include "train/preflight.hpp"
#include "train/trainer.hpp"

namespace trident {
namespace {

// What `eval` changes in the deck: the evaluated data stands in for the validation data (and for the
// training data when the deck has none: the trainer maps it but never reads it), the checkpoint is read
// and never written (no lock on its directory: a training run may be writing there), no metrics or trace.
Config evaluation_config(Config cfg, const std::string& checkpoint, const std::string& data) {
  cfg.data.val_path = data;
  if (cfg.data.path.empty()) cfg.data.path = data;
  cfg.checkpoint.resume = checkpoint.empty() ? "never" : checkpoint;
  cfg.checkpoint.dir.clear();
  cfg.checkpoint.every_steps = 0;
  cfg.checkpoint.every_minutes = 0;
  cfg.runtime.metrics.clear();
  cfg.runtime.trace.clear();
  cfg.runtime.op_profile.clear();
  return cfg;
}

}  // namespace

int run_eval(const EvalArgs& args) {
  log::use_job_log_streams();
  if (!args.hellaswag.empty()) return run_eval_hellaswag(args);
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const Config deck = load_deck_logged(args, DeckOptions{world});
  const std::string data = !args.data.empty() ? args.data : deck.data.val_path;
  if (data.empty())
    throw Error(fmt::format("{}: nothing to evaluate on: give --data PATH or set [data] val_path", deck.source));
  const std::string checkpoint = model_checkpoint(args.checkpoint, deck, "evaluate");
  const Config cfg = evaluation_config(deck, checkpoint, data);
  check_supported(cfg);
  log::info("trident eval {} (tp {} x pp {} x dp {}, {} ranks): {} on {}", cfg.source, cfg.mesh.tp, cfg.mesh.pp,
            cfg.mesh.dp, world, checkpoint.empty() ? "model.init_from " + cfg.model.init_from : checkpoint, data);
  const watchdog::Monitor monitor(cfg.runtime.collective_timeout_s, cfg.runtime.checkpoint_timeout_s);
  const auto mesh = make_mesh(cfg);
  check_memory_fits(cfg, mesh->node().local_size);
  const auto backend = start_backend_on(*mesh, cfg);
  Trainer trainer(cfg, backend->kernels(), mesh.get());
  const double start = MPI_Wtime();
  const EvalTotals totals = trainer.evaluate(kValStepsAll);
  const double seconds = MPI_Wtime() - start;
  const double loss = totals.mean_loss();
  const auto stream = open_token_stream(cfg.data.format, data, cfg.model.vocab_size);
  const int64_t unscored = stream->size() - 1 - totals.positions;  // the first token is never a target
  log::info("eval: loss {:.4f} | perplexity {:.3f} | {} positions scored in {} windows of {} | {} s, {:.0f} tok/s",
            loss, std::exp(loss), totals.positions, totals.windows, cfg.model.seq_len, fmt::format("{:.1f}", seconds),
            double(totals.positions) / seconds);
  log::info("eval: data {}; {} token(s) at its end fill no whole window and are not scored", stream->describe(),
            unscored);
  if (!args.json.empty() && log::is_root()) {
    const nlohmann::json out = {{"loss", loss},
                                {"perplexity", std::exp(loss)},
                                {"positions", totals.positions},
                                {"windows", totals.windows},
                                {"seq_len", cfg.model.seq_len},
                                {"tokens_not_scored", unscored},
                                {"data", data},
                                {"checkpoint", checkpoint},
                                {"seconds", seconds}};
    write_file_atomically("eval results", args.json, out.dump(2) + "\n");
  }
  return 0;
}

}  // namespace trident
