#include "train/train_run_util.hpp"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "common/test_support.hpp"

namespace trident::test {

const char* const kTinyTextDeck = R"(
[model]
vocab_size = 256
seq_len = 16
layers = 2
hidden = 32
heads = 4
seed = 5
[train]
steps = 4
micro_batch = 2
global_batch = 4
lr = 1e-3
warmup_steps = 1
[data]
format = "text"
path = "/usr/share/common-licenses/GPL-3"
[runtime]
mpi_wait = "poll"
)";

TrainOutput run_train(int np, const std::string& deck, const std::vector<std::string>& sets) {
  TrainOutput r;
  r.dir = make_temp_dir("trident-train-run");
  write_file(r.dir + "/deck.toml", deck);
  std::string cmd = fmt::format("cd {} && {} OPENBLAS_NUM_THREADS=1 timeout -k 5 300 {} -n {} {} train deck.toml "
                                "--set runtime.metrics=metrics.jsonl",
                                r.dir, without_parent_mpi_env(), local_mpiexec(), np, trident_binary());
  for (const auto& s : sets) cmd += " --set " + s;
  r.rc = run_command(cmd, &r.out);
  r.out = "$ " + cmd + "\n" + r.out;
  std::ifstream f(r.dir + "/metrics.jsonl");
  for (std::string line; std::getline(f, line);) r.steps.push_back(nlohmann::json::parse(line));
  return r;
}

CommandRun run_trident(const std::string& dir, int np, const std::string& args) {
  CommandRun r;
  const std::string cmd = fmt::format("cd {} && {} OPENBLAS_NUM_THREADS=1 timeout -k 5 120 {} -n {} {} {}", dir,
                                      without_parent_mpi_env(), local_mpiexec(), np, trident_binary(), args);
  r.rc = run_command(cmd, &r.out);
  r.out = "$ " + cmd + "\n" + r.out;
  return r;
}

std::vector<std::string> lines_with(const std::string& text, const std::string& needle) {
  std::vector<std::string> found;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.find(needle) != std::string::npos) found.push_back(line);
  return found;
}

}  // namespace trident::test
