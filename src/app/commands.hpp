#pragma once
// The subcommands behind the command line (cli.cpp parses, these run).
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "deck/deck.hpp"
#include "generate/sampler.hpp"

namespace trident {

struct DeckArgs {
  std::string deck;
  std::vector<std::string> overrides;  // --set section.key=value
};

// `check` checks what `train` would refuse, for a launch on `ranks` ranks (0: the world size when run
// under mpiexec with several ranks, otherwise the size is only reported); deck_only: the deck alone
// (decks for planning, whose data is a placeholder).
struct CheckArgs : DeckArgs {
  int ranks = 0;
  bool deck_only = false;
};

// `topology`: on the launched job, or (ranks > 0) a preview of the layout for that many ranks without
// launching them.
struct TopologyArgs : DeckArgs {
  int ranks = 0;
};

// `eval`: the loss over the whole of `data` (default: data.val_path) of the model in `checkpoint` (a file
// or a directory's newest; default: checkpoint.dir's newest, else model.init_from); `json`: also write
// the figures there.
// With `hellaswag`: multiple-choice accuracy over that JSONL file instead (eval_hellaswag.cpp).
struct EvalArgs : DeckArgs {
  std::string checkpoint, data, json, hellaswag;
};

// `generate`: samples from the model in `checkpoint` (as for eval) after a prompt given as text, a file or
// token ids (default: the end-of-text token).
struct GenerateArgs : DeckArgs {
  std::string checkpoint, prompt, prompt_file, prompt_ids, json;
  int64_t max_new_tokens = 64;
  int64_t samples = 1;
  SamplingOptions sampling{1.0, 0, 1.0, 1337};
  bool no_stop = false;  // go on past the end-of-text token
};
int run_train(const DeckArgs& args);
int run_eval(const EvalArgs& args);
int run_eval_hellaswag(const EvalArgs& args);
int run_generate(const GenerateArgs& args);
int run_check(const CheckArgs& args);
int run_topology(const TopologyArgs& args);

// `trident ckpt list|inspect|verify|export`.
void add_ckpt_command(CLI::App& app);

// `trident data prepare`.
void add_data_command(CLI::App& app);

// Loads the deck on every rank; warnings are logged once (rank 0).
Config load_deck_logged(const DeckArgs& args, const DeckOptions& options);

}  // namespace trident
