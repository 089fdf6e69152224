// Memory per rank (issue 14), measured as `trident train` reports it: the peak resident set of each
// rank (VmHWM) and the categories it is split into.
//  * At tp 2 x pp 2 no rank may come near the whole model: each rank's peak RSS stays below a bound
//    computed here from its own shard (16 bytes per parameter of its slice: weights, gradients, Adam
//    m and v), plus the activations and buffers it reports and a fixed allowance for the runtime.
//    The whole model in fp32 is larger than that allowance, so a whole-model start-up buffer (what
//    start-up used before issue 14) or a whole-state checkpoint read fails the test.
//  * `trident plan`'s memory model (the cpu preset) predicts each tested layout's largest peak RSS
//    within 15% in fp32, within 10% in bf16.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <regex>
#include <stdexcept>

#include "deck/deck.hpp"
#include "planner/cluster.hpp"
#include "planner/layout.hpp"
#include "planner/memory_model.hpp"
#include "train/train_run_util.hpp"

namespace trident::test {
namespace {

// 63 M parameters, 252 MB in fp32; a rank of tp 2 x pp 2 holds about a quarter.
constexpr int64_t V = 8192, T = 32, L = 8, C = 768;
const std::string kDeck = fmt::format(R"(
[model]
vocab_size = {}
seq_len = {}
layers = {}
hidden = {}
heads = 12
seed = 5
[train]
steps = 2
micro_batch = 1
global_batch = 4
lr = 1e-4
[data]
format = "text"
path = "/usr/share/common-licenses/GPL-3"
[runtime]
mpi_wait = "poll"
)",
                                      V, T, L, C);

// Beyond the measured runtime baseline: run-to-run spread of the runtime (37-51 MiB seen) and the
// start-up staging of the largest tensor (a rank's half of the embedding, 12 MiB).
constexpr double kRuntimeSlack = 60.0 * 1048576.0;

struct RankMemory {
  int dp = 0, pp = 0, tp = 0;
  double parameters = 0, gradients = 0, optimizer = 0, activations = 0, buffers = 0, runtime = 0, peak_rss = 0;
};

std::vector<RankMemory> memory_lines(const std::string& out) {
  const std::regex re(R"(memory of rank \d+ \(dp (\d+), pp (\d+), tp (\d+)\): parameters ([0-9.]+) MiB \| gradients )"
                      R"(([0-9.]+) MiB \| optimizer state ([0-9.]+) MiB \| activations ([0-9.]+) MiB \| buffers )"
                      R"(([0-9.]+) MiB \| runtime ([0-9.]+) MiB \| peak RSS ([0-9.]+) MiB)");
  std::vector<RankMemory> ranks;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator(); ++it) {
    const auto& m = *it;
    const auto mib = [&](int i) { return std::stod(m[i]) * 1048576.0; };
    ranks.push_back({std::stoi(m[1]), std::stoi(m[2]), std::stoi(m[3]), mib(4), mib(5), mib(6), mib(7), mib(8), mib(9),
                     mib(10)});
  }
  return ranks;
}

// Parameters of the TP slice of pipeline stage `stage` (of 2, 4 layers each, tied embeddings): the
// Megatron split of each layer (QKV, c_fc column-parallel with their biases; the projections
// row-parallel; LayerNorms and the projections' biases replicated), the vocabulary-parallel
// embedding on the first stage with the position embedding, the final LayerNorm and the LM head's
// copy of the embedding on the last.
double shard_parameters(int stage, int tp) {
  const double layer = (3.0 * C * C + 3 * C + C * C + 4.0 * C * C + 4 * C + 4.0 * C * C) / tp + 6.0 * C;
  const double vocab = double(V) / tp * C;  // V is a multiple of the padding and of tp
  double p = 4 * layer + vocab;
  p += stage == 0 ? double(T) * C : 2.0 * C;
  return p;
}

// What the process costs beyond the backend's allocations (libraries: the CUDA ones in a CUDA build,
// ~170 MiB more than a CPU build; MPI; allocator slack), measured on a one-layer serial run of the
// same binary. A whole-model buffer there would be a one-layer model's, far below the slack.
double runtime_baseline() {
  static const double baseline = [] {
    const TrainOutput run = run_train(1, kDeck, {"model.layers=1"});
    const auto ranks = memory_lines(run.out);
    if (run.rc != 0 || ranks.size() != 1) throw std::runtime_error("the baseline run failed:\n" + run.out);
    return ranks[0].runtime;
  }();
  return baseline;
}

double whole_model_parameters() { return L * (12.0 * C * C + 13.0 * C) + double(V) * C + double(T) * C + 2.0 * C; }

TEST(MemoryPerRank, NoRankOfTp2Pp2HoldsMoreThanItsShard) {
  // The test can only catch a whole-model buffer if such a buffer cannot hide in the slack.
  ASSERT_GT(4 * whole_model_parameters(), kRuntimeSlack);
  const double allowance = runtime_baseline() + kRuntimeSlack;
  const TrainOutput run = run_train(4, kDeck, {"mesh.tp=2", "mesh.pp=2", "mesh.layers_per_stage=[4,4]"});
  ASSERT_EQ(run.rc, 0) << run.out;
  const auto ranks = memory_lines(run.out);
  ASSERT_EQ(ranks.size(), 4u) << run.out;
  for (const auto& r : ranks) {
    const double states = 16.0 * shard_parameters(r.pp, 2);
    EXPECT_NEAR(r.parameters + r.gradients + r.optimizer, states, 1e-3 * states)
        << "the account's model states are not the shard's (pp " << r.pp << ", tp " << r.tp << ")";
    const double bound = states + r.activations + r.buffers + allowance;
    EXPECT_LT(r.peak_rss, bound) << fmt::format(
        "rank pp {} tp {}: peak RSS {:.1f} MiB above the bound of its shard {:.1f} MiB (whole model {:.1f} MiB)", r.pp,
        r.tp, r.peak_rss / 1048576.0, bound / 1048576.0, 4 * whole_model_parameters() / 1048576.0);
  }
}

// ZeRO-2 and ZeRO-3 at dp 2: the optimizer state is the rank's half, and no rank's peak RSS, at start-up
// and over the run, exceeds what its account holds (partitions, gathered layers, staging) by more than
// the runtime allowance: a whole-chunk gradient or parameter buffer, even one freed right after
// start-up (as before this test), breaks the bound.
// MPICH's own buffers for the DP collectives (reduce-scatters of whole layer segments, the gathers of
// zero 3), which the backend's allocator does not see: 65-100 MiB measured here at dp 2.
constexpr double kDpCollectiveSlack = 110.0 * 1048576.0;

void expect_no_whole_chunk_buffer(const std::string& zero) {
  ASSERT_GT(4 * whole_model_parameters(), kRuntimeSlack + kDpCollectiveSlack);
  const double allowance = runtime_baseline() + kRuntimeSlack + kDpCollectiveSlack;
  const TrainOutput run = run_train(2, kDeck, {"mesh.dp=2", "mesh.zero=" + zero});
  ASSERT_EQ(run.rc, 0) << run.out;
  const auto ranks = memory_lines(run.out);
  ASSERT_EQ(ranks.size(), 2u) << run.out;
  // Rank 0 at start-up, before any collective: only the runtime allowance beyond what it holds. (A
  // whole-chunk buffer freed after start-up is partly touched and shows here, not at the end.)
  const std::regex startup(R"(memory per rank at start-up: parameters ([0-9.]+) MiB \| gradients ([0-9.]+) MiB \| )"
                           R"(optimizer state ([0-9.]+) MiB \| activations ([0-9.]+) MiB \| buffers ([0-9.]+) MiB \| )"
                           R"(runtime [0-9.]+ MiB \| peak RSS ([0-9.]+) MiB)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(run.out, m, startup)) << run.out;
  double held_at_start = 0;
  for (int i = 1; i <= 5; ++i) held_at_start += std::stod(m[i]) * 1048576.0;
  const double start_bound = held_at_start + runtime_baseline() + kRuntimeSlack;
  EXPECT_LT(std::stod(m[6]) * 1048576.0, start_bound)
      << fmt::format("zero {}: start-up peak RSS {} MiB above what rank 0 holds plus the runtime allowance: {:.1f} MiB",
                     zero, m[6].str(), start_bound / 1048576.0);
  for (const auto& r : ranks) {
    EXPECT_NEAR(r.optimizer, 8.0 * whole_model_parameters() / 2, 0.01 * r.optimizer) << "dp rank " << r.dp;
    const double held = r.parameters + r.gradients + r.optimizer + r.activations + r.buffers;
    EXPECT_LT(r.peak_rss, held + allowance) << fmt::format(
        "zero {} dp rank {}: peak RSS {:.1f} MiB above what it holds, {:.1f} MiB, plus the runtime allowance {:.1f} "
        "MiB (one whole-chunk buffer: {:.1f} MiB)",
        zero, r.dp, r.peak_rss / 1048576.0, held / 1048576.0, allowance / 1048576.0,
        4 * whole_model_parameters() / 1048576.0);
  }
}

TEST(MemoryPerRank, Zero2Dp2HoldsNoWholeGradientBuffer) { expect_no_whole_chunk_buffer("2"); }
TEST(MemoryPerRank, Zero3Dp2HoldsNoWholeParameterOrGradientBuffer) { expect_no_whole_chunk_buffer("3"); }

// The planner's peak stage against the measured peak RSS of the ranks of that stage, within `tolerance`
// of it: 15% for fp32 (issue 14's bound), 10% for bf16 (#26's). `measured` (when given) receives the
// ranks' reports.
void expect_planner_within(double tolerance, int np, const std::vector<std::string>& sets,
                           std::vector<RankMemory>* measured_ranks = nullptr) {
  const TrainOutput run = run_train(np, kDeck, sets);
  ASSERT_EQ(run.rc, 0) << run.out;
  const auto ranks = memory_lines(run.out);
  ASSERT_EQ(int(ranks.size()), np) << run.out;
  if (measured_ranks) *measured_ranks = ranks;
  std::vector<std::string> overrides = sets;
  overrides.push_back("runtime.metrics=m.jsonl");
  const Config cfg = parse_deck(kDeck, "memory.toml", overrides);
  // The preset's runtime reserve is a CPU build's; this binary's is measured.
  auto cluster = planner::load_cluster("cpu");
  cluster.reserved_gib = runtime_baseline() / double(1 << 30);
  const auto layout = planner::layout_of(cfg);
  const auto est = planner::estimate_memory(cfg, cluster, layout, planner::place(cluster, layout, cfg.mesh.order));
  for (const auto& stage : est.stages) {
    double measured = 0;
    const RankMemory* worst = nullptr;
    for (const auto& r : ranks)
      if (r.pp == stage.stage && r.peak_rss > measured) {
        measured = r.peak_rss;
        worst = &r;
      }
    ASSERT_TRUE(worst) << "no rank of stage " << stage.stage << "\n" << run.out;
    // The table of benchmarks/README.md, "Memory per rank": planned / measured MiB per category.
    const auto mib = [](double b) { return b / 1048576.0; };
    std::printf("| %s | %d | %.1f / %.1f | %.1f / %.1f | %.1f / %.1f | %.1f / %.1f | %.1f / %.1f | %.1f / %.1f | %.1f | "
                "%.1f | %+.1f%% |\n",
                sets.empty() ? "serial" : fmt::format("{}", fmt::join(sets, " ")).c_str(), stage.stage,
                mib(stage.parameters()), mib(worst->parameters), mib(stage.gradients()), mib(worst->gradients),
                mib(stage.optimizer_state()), mib(worst->optimizer), mib(stage.all_activations()),
                mib(worst->activations), mib(stage.buffers()), mib(worst->buffers), mib(stage.runtime()),
                mib(worst->runtime), mib(stage.total()), mib(measured), 100 * (stage.total() - measured) / measured);
    EXPECT_NEAR(stage.total(), measured, tolerance * measured) << fmt::format(
        "{}: stage {}: planned {:.1f} MiB (parameters {:.1f}, gradients {:.1f}, optimizer {:.1f}, activations {:.1f}, "
        "buffers {:.1f}, runtime {:.1f}), measured peak RSS {:.1f} MiB",
        fmt::join(sets, " "), stage.stage, stage.total() / 1048576.0, stage.parameters() / 1048576.0,
        stage.gradients() / 1048576.0, stage.optimizer_state() / 1048576.0, stage.all_activations() / 1048576.0,
        stage.buffers() / 1048576.0, stage.runtime() / 1048576.0, measured / 1048576.0);
  }
}

// The planner's estimate of the first stage of kDeck with `sets`.
planner::StageMemory planned_first_stage(const std::vector<std::string>& sets) {
  const Config cfg = parse_deck(kDeck, "memory.toml", sets);
  const auto cluster = planner::load_cluster("cpu");
  const auto layout = planner::layout_of(cfg);
  return planner::estimate_memory(cfg, cluster, layout, planner::place(cluster, layout, cfg.mesh.order)).stages.at(0);
}

TEST(MemoryPerRank, PlannerWithin15PercentSerial) { expect_planner_within(0.15, 1, {}); }
TEST(MemoryPerRank, PlannerWithin15PercentTp2) { expect_planner_within(0.15, 2, {"mesh.tp=2"}); }
TEST(MemoryPerRank, PlannerWithin15PercentPp2) { expect_planner_within(0.15, 2, {"mesh.pp=2"}); }
TEST(MemoryPerRank, PlannerWithin15PercentDp2Zero1) {
  expect_planner_within(0.15, 2, {"mesh.dp=2", "mesh.zero=1"});
}
TEST(MemoryPerRank, PlannerWithin15PercentTp2Pp2) {
  expect_planner_within(0.15, 4, {"mesh.tp=2", "mesh.pp=2", "mesh.layers_per_stage=[4,4]"});
}

// train.precision = "bf16" on a shape whose activations outweigh its model states (6.5 M parameters,
// 105 MB of states; 8 x 256 tokens a micro-batch, 8 layers): the planner stays within 10% of the peak
// RSS (#26's bound; fp32 within 15%), and the activations the run reports fall as the planner says. Per layer the slots keep
// 36 of fp32's 64 bytes per token and hidden unit (model/gpt.hpp: the residual stream stays fp32), but the
// fp32 scratch (gradient buffers, logits) stays and one layer's tensors are unpacked into an fp32 set, so
// the whole activation account falls to about 0.7 of fp32's here (0.56 for the slots alone,
// TrainingInvariants.Bf16StorageKeepsTheSavedActivationsInHalfTheBytes).
TEST(MemoryPerRank, Bf16ActivationsFallAsPlannedAndThePlannerFollows) {
  const std::vector<std::string> shape = {"model.hidden=256",   "model.heads=4",       "model.layers=8",
                                          "model.seq_len=256",  "model.vocab_size=512", "train.micro_batch=8",
                                          "train.global_batch=8"};
  std::vector<std::string> bf16 = shape;
  bf16.push_back("train.precision=bf16");
  std::vector<RankMemory> fp32_ranks, bf16_ranks;
  expect_planner_within(0.15, 1, shape, &fp32_ranks);
  expect_planner_within(0.10, 1, bf16, &bf16_ranks);
  ASSERT_EQ(fp32_ranks.size(), 1u);
  ASSERT_EQ(bf16_ranks.size(), 1u);
  const double ratio = bf16_ranks[0].activations / fp32_ranks[0].activations;
  const double planned_ratio = planned_first_stage(bf16).all_activations() / planned_first_stage(shape).all_activations();
  std::printf("[bf16 memory] activations %.1f MiB (fp32 %.1f MiB): %.3f, planned %.3f; peak RSS %.1f MiB (fp32 %.1f "
              "MiB)\n",
              bf16_ranks[0].activations / 1048576.0, fp32_ranks[0].activations / 1048576.0, ratio, planned_ratio,
              bf16_ranks[0].peak_rss / 1048576.0, fp32_ranks[0].peak_rss / 1048576.0);
  EXPECT_NEAR(ratio, planned_ratio, 0.1 * planned_ratio);
  EXPECT_LT(ratio, 0.8) << "bf16 storage barely shrank the activations";
  EXPECT_LT(bf16_ranks[0].peak_rss, fp32_ranks[0].peak_rss);
}

// A bf16 working copy at dp 2, zero 1: each rank reports as parameters the working copy's bf16 patterns
// (2 bytes a parameter) and the fp32 buffer of the segments it widens (the larger of a layer and the
// position embedding), as the planner plans them (within 2%: the report's 0.1 MiB),
// well under fp32 storage's 4 bytes a parameter; and the peak within 10% (#26; fp32 15%).
TEST(MemoryPerRank, Bf16WorkingCopyParametersAsPlanned) {
  const std::vector<std::string> sets = {"mesh.dp=2", "mesh.zero=1", "train.precision=bf16"};
  std::vector<RankMemory> ranks;
  expect_planner_within(0.10, 2, sets, &ranks);
  const planner::StageMemory planned = planned_first_stage(sets);
  ASSERT_EQ(ranks.size(), 2u);
  for (const RankMemory& r : ranks) {
    EXPECT_NEAR(r.parameters, planned.states.parameters, 0.02 * planned.states.parameters);
    EXPECT_LT(r.parameters, 0.75 * 4.0 * planned.params) << "not under fp32 storage of the working copy";
  }
  std::printf("[bf16 working copy] parameters %.1f MiB (planned %.1f MiB; %.3g M parameters)\n",
              ranks[0].parameters / 1048576.0, planned.states.parameters / 1048576.0, planned.params / 1e6);
}

}  // namespace
}  // namespace trident::test
