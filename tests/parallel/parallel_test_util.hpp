#pragma once
// Shared set-up for the parallel-equivalence tests: a small GPT deck, a token file, a serial run of
// the same deck on this rank for reference, and whole-model views of a (sharded) model.
#include <map>
#include <string>
#include <vector>

#include "comm/mesh.hpp"
#include "deck/deck.hpp"
#include "train/trainer.hpp"

namespace trident::test {

// A deck for a 2-layer GPT (hidden 64, 4 heads, seq 16) on an llm.c shard of random tokens written
// to a per-process temporary directory; `overrides` are --set style.
Config small_deck(int64_t vocab, const std::vector<std::string>& overrides);

// Per-step losses and the whole-model gradients after step 1, unpadded, by Hugging Face name.
struct RunResult {
  std::vector<double> losses;
  std::vector<double> grad_norms;
  std::map<std::string, std::vector<float>> step1_grads;
  std::map<std::string, std::vector<float>> final_params;
  std::vector<std::string> finishing_phases;  // of the last step (train/gradient_finisher.hpp)
};
RunResult run_steps(const Config& cfg, ParallelMesh* mesh, int64_t steps);

// Relative L2 distance ||a - b|| / ||b|| (0 when both are zero).
double relative_l2(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace trident::test
