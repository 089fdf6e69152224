#pragma once
// Runs `mpiexec -n N trident train` on a small byte-level deck, as a user would, and returns what the
// run printed and its JSON-lines metrics: for the tests of what a training run reports.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace trident::test {

// 2 layers, hidden 32, 4 heads, seq 16 on /usr/share/common-licenses/GPL-3; 4 sequences of 2 per
// step; runtime.mpi_wait = "poll" (the tests oversubscribe the cores).
extern const char* const kTinyTextDeck;

struct TrainOutput {
  int rc = -1;
  std::string out;                    // the command, then stdout + stderr
  std::vector<nlohmann::json> steps;  // the metrics file, one object per step
  std::string dir;                    // a fresh directory of this run (deck, metrics, trace)
};

// Runs the deck with the --set overrides `sets` (runtime.metrics is set to a file in `dir`).
TrainOutput run_train(int np, const std::string& deck, const std::vector<std::string>& sets);

// `trident ARGS` (a subcommand and its arguments) run in `dir` on `np` ranks: its exit status, and the
// command followed by its stdout + stderr.
struct CommandRun {
  int rc = -1;
  std::string out;
};
CommandRun run_trident(const std::string& dir, int np, const std::string& args);

// The lines of `text` that contain `needle`.
std::vector<std::string> lines_with(const std::string& text, const std::string& needle);

}  // namespace trident::test
