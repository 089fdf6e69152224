#include "app/cli.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <mpi.h>

#include <iostream>

#include "app/commands.hpp"
#include "app/process_limits.hpp"
#include "core/blas_runtime.hpp"
#include "core/error.hpp"
#include "core/fatal.hpp"
#include "core/fault_injection.hpp"
#include "core/log.hpp"
#include "core/mpi_start.hpp"
#include "deck/toml_text.hpp"
#include "planner/plan_command.hpp"
#include "train/stop_signals.hpp"
#include "trident_version.hpp"

namespace trident {
namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// Adds the DECK positional and the repeatable --set option shared by every deck command.
void add_deck_args(CLI::App* cmd, DeckArgs& args) {
  // No CLI::ExistingFile check: load_deck reports a missing or unreadable deck as a deck error (exit 2).
  cmd->add_option("deck", args.deck, "Input deck (TOML); see input/README.md")->required();
  cmd->add_option("--set", args.overrides,
                  "Override a deck key: section.key=value (repeatable; value read as TOML, bare words as strings)")
      ->type_name("KEY=VALUE")
      ->take_last()
      ->allow_extra_args(false);
}

// The message for a command word that names no subcommand ("trident trian", "trident ckpt lsit"), or ""
// when every command word is known. CLI11 alone says only "A subcommand is required".
std::string unknown_command_message(CLI::App& app, int argc, char** argv) {
  CLI::App* current = &app;
  std::string path = "trident";
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word.empty() || word[0] == '-') continue;  // the options of trident itself take no value
    const auto subcommands = current->get_subcommands([](CLI::App*) { return true; });
    if (subcommands.empty()) return "";
    std::vector<std::string> names;
    CLI::App* found = nullptr;
    for (CLI::App* sub : subcommands) {
      names.push_back(sub->get_name());
      if (sub->get_name() == word) found = sub;
    }
    if (!found) {
      const std::string close = closest_match(word, names, /*prefixes=*/true);
      return fmt::format("'{}' is not a `{}` command{} (commands: {}; `{} --help` describes them)", word, path,
                         close.empty() ? "" : fmt::format("; did you mean '{}'?", close), fmt::join(names, ", "), path);
    }
    current = found;
    path += " " + word;
  }
  return "";
}

int parse_and_run(int argc, char** argv) {
  CLI::App app{"trident: 3D-parallel (tensor x pipeline x data) GPT training for HPC clusters"};
  app.set_version_flag("--version", std::string("trident ") + TRIDENT_VERSION +
                                        (TRIDENT_CUDA_ENABLED ? " (CUDA build)" : " (CPU build)"));
  app.require_subcommand(1);

  DeckArgs train_args;
  TopologyArgs topo_args;
  CheckArgs check_args;
  auto* train = app.add_subcommand("train", "Train the model the deck describes");
  add_deck_args(train, train_args);
  auto* check = app.add_subcommand("check", "Validate a deck and print the resolved configuration and derived figures");
  add_deck_args(check, check_args);
  check->add_option("--ranks", check_args.ranks, "Check for a launch on this many ranks (default: mpiexec's world)")
      ->check(CLI::PositiveNumber);
  check->add_flag("--deck-only", check_args.deck_only,
                  "Validate the deck only, not whether `train` can start (data, build features)");
  EvalArgs eval_args;
  auto* eval = app.add_subcommand("eval", "Loss and perplexity of a checkpoint over a whole dataset");
  add_deck_args(eval, eval_args);
  eval->add_option("--checkpoint", eval_args.checkpoint,
                   "Checkpoint file, or directory (its newest); default: the deck's checkpoint.dir");
  eval->add_option("--data", eval_args.data, "Data to evaluate, in data.format; default: data.val_path");
  eval->add_option("--json", eval_args.json, "Also write the figures to this file as JSON");
  eval->add_option("--hellaswag", eval_args.hellaswag,
                   "Multiple-choice accuracy over this file in HellaSwag's JSONL format, instead of the loss")
      ->excludes("--data");
  GenerateArgs gen_args;
  auto* gen = app.add_subcommand("generate", "Text from a checkpoint (KV cache; tensor-parallel over the ranks)");
  add_deck_args(gen, gen_args);
  gen->add_option("--checkpoint", gen_args.checkpoint,
                  "Checkpoint file, or directory (its newest), or an export (`ckpt export`'s directory); default: the "
                  "deck's checkpoint.dir, else model.init_from");
  gen->add_option("--prompt", gen_args.prompt, "Text to continue (default: the end-of-text token)");
  gen->add_option("--prompt-file", gen_args.prompt_file, "Read the prompt from this file");
  gen->add_option("--prompt-ids", gen_args.prompt_ids, "The prompt as token ids: \"464, 3290\"");
  gen->add_option("--max-new-tokens", gen_args.max_new_tokens, "Tokens to generate per sample")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  gen->add_option("--samples", gen_args.samples, "Samples of the prompt, decoded side by side")
      ->capture_default_str()->check(CLI::PositiveNumber);
  gen->add_option("--temperature", gen_args.sampling.temperature, "Softmax temperature; 0: greedy")
      ->capture_default_str();
  gen->add_option("--top-k", gen_args.sampling.top_k, "Sample from the k most likely tokens; 0: all")
      ->capture_default_str();
  gen->add_option("--top-p", gen_args.sampling.top_p, "Sample from the most likely tokens holding this probability")
      ->capture_default_str();
  gen->add_option("--seed", gen_args.sampling.seed, "Seed of the samples' random streams")->capture_default_str();
  gen->add_flag("--no-stop", gen_args.no_stop, "Do not end a sample at the end-of-text token");
  gen->add_option("--json", gen_args.json, "Also write the prompt and samples (text and ids) to this file");
  auto* topology = app.add_subcommand("topology", "Print each rank's node and (dp, pp, tp) coordinates and every group");
  add_deck_args(topology, topo_args);
  topology->add_option("--ranks", topo_args.ranks,
                       "Preview the layout for this many ranks without launching them (as `check --ranks N`)")
      ->check(CLI::PositiveNumber);
  auto* reference = app.add_subcommand("deck-reference", "Print the Markdown reference of every deck key");
  planner::add_plan_command(app, [](const std::string& deck, const std::vector<std::string>& overrides) {
    return load_deck(deck, overrides, DeckOptions{});
  });
  add_ckpt_command(app);
  add_data_command(app);

  int rc = 0;
  train->callback([&] { rc = run_train(train_args); });
  check->callback([&] { rc = run_check(check_args); });
  eval->callback([&] { rc = run_eval(eval_args); });
  gen->callback([&] { rc = run_generate(gen_args); });
  topology->callback([&] { rc = run_topology(topo_args); });
  reference->callback([&] {
    if (world_rank() == 0) std::cout << deck_reference_markdown();
  });

  const std::string unknown = unknown_command_message(app, argc, argv);
  if (!unknown.empty()) {
    if (world_rank() == 0) log::error("{}", unknown);
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; a usage error exits 2, as every other user error. One rank prints.
    if (world_rank() == 0) app.exit(e);
    return e.get_exit_code() == 0 ? 0 : 2;
  }
  return rc;
}

}  // namespace

int cli_main(int argc, char** argv, MpiThreads mpi_threads) {
  // Before anything that takes time: a signal arriving while the default action stands kills the
  // process (SIGUSR1: exit 10) instead of being handled.
  install_stop_signal_counters();
  // (blocked across a re-execution, which resets handlers; pending ones are delivered below)
  tune_blas_for_this_cpu(argc, argv);
  unblock_stop_signals();
  if (!raise_open_file_limit()) return 2;
  {
    // MPICH's MPI_Init installs its own SIGUSR1 handler (hydra's notice of a failed process): a Slurm
    // SIGUSR1 reaching it makes a one-process run spawn an mpiexec that fails, then wait for it forever.
    // So SIGUSR1 is held through MPI_Init and ours is installed again before it is delivered. Threads
    // MPI_Init starts inherit the mask, so the signal reaches this thread. SIGTERM stays deliverable:
    // it ends a start-up that MPI_Init blocks.
    const StopSignalsHeld held;
    start_mpi(&argc, &argv, mpi_threads);
    install_stop_signal_counters();
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  log::init(rank, size);
  install_fatal_handlers();
  const int rc = run_or_abort([&] {
    fault::check_environment();
    return parse_and_run(argc, argv);
  });
  MPI_Finalize();
  return rc;
}

}  // namespace trident
