#pragma once
// One parallel layout the planner evaluates: the (tp, pp, dp, micro-batch, schedule, ZeRO stage,
// recompute, sequence parallelism) choice. The workload (model, global batch, precision, rank order)
// comes from the deck's Config; the layout replaces the deck's own mesh/train choices.
#include <cstdint>
#include <string>
#include <tuple>

#include "core/config.hpp"

namespace trident::planner {

struct Layout {
  int tp = 1;
  int pp = 1;
  int dp = 1;
  int64_t micro_batch = 1;
  Schedule schedule = Schedule::OneFOneB;
  int virtual_stages = 1;
  int zero = 0;
  Recompute recompute = Recompute::None;
  bool sequence_parallel = false;

  int world() const { return tp * pp * dp; }
  auto key() const {
    return std::make_tuple(tp, pp, dp, micro_batch, int(schedule), virtual_stages, zero, int(recompute),
                           sequence_parallel);
  }
  bool operator==(const Layout& o) const { return key() == o.key(); }
  bool operator!=(const Layout& o) const { return !(*this == o); }
  bool operator<(const Layout& o) const { return key() < o.key(); }
};

// "tp 8 x pp 16 x dp 8, micro_batch 1, 1f1b, zero 0, recompute full, sp on"
std::string describe(const Layout& l);

// The deck's own layout.
Layout layout_of(const Config& cfg);

// `cfg` with its mesh/train choices replaced by the layout's.
Config with_layout(Config cfg, const Layout& l);

// The deck's cross-key rules that involve the layout (the same rules `trident check` applies; see
// src/deck/deck.cpp): heads and ffn_hidden divisible by tp, global_batch by micro_batch*dp, at least one
// layer per pipeline chunk, interleaved needs v >= 2 and micro-batches a multiple of pp, virtual stages
// only with interleaved, sequence parallelism needs seq_len divisible by tp. Returns "" when the layout
// is valid, else the first violated rule.
std::string layout_rule_violation(const Config& cfg, const Layout& l);

// Model dimensions as the implementation stores them.
int64_t ffn_hidden_of(const ModelConfig& m);
int64_t padded_vocab(const ModelConfig& m, int tp);  // multiple of lcm(vocab_pad_to, tp)

// Micro-batches per optimizer step per pipeline: global_batch / (micro_batch * dp).
int64_t micro_batches(const Config& cfg, const Layout& l);

}  // namespace trident::planner
