// The throughput figures of `trident train` (every step's metrics and the summary line) against the
// training FLOPs of the model, computed here from its shape with the convention of model/flops.hpp
// (Narayanan et al. 2021, Sec. 5.1): every GEMM, 2 FLOPs per multiply-add; per layer and token in the
// forward pass QKV 2*C*3C, the attention output projection 2*C*C, the MLP 2*C*4C twice, and the
// attention products QK^T and AV T*C each (2*T*C without the causal mask, which leaves half of the [T,T]
// products: llm.c's 6LTd); the LM head 2*C*V, tied
// or not; backward twice the forward. Embedding lookups, LayerNorms and biases are not GEMMs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <regex>

#include "train/train_run_util.hpp"

namespace trident::test {
namespace {

// The model of kTinyTextDeck: vocabulary 256, seq 16, 2 layers, hidden 32, tied embeddings.
constexpr double V = 256, T = 16, L = 2, C = 32;
constexpr double kTokensPerStep = 4 * T;
constexpr double kPeakTflops = 1e-6;  // tiny, so that MFU has four significant digits in the summary

// The head is one C x V GEMM whether or not it shares the token embedding's weights.
double training_flops_per_token() {
  const double layer_forward = 2 * C * 3 * C + 2 * C * C + 2 * (2 * C * 4 * C) + 2 * (T * C);
  return 3 * (L * layer_forward + 2 * C * V);
}

struct Summary {
  double ms_per_step = 0, tokens_per_s = 0, tflops = 0, mfu_percent = 0;
};

Summary parse_summary(const std::string& out) {
  const std::regex re(R"(summary: \d+ steps \| loss \S+ -> \S+ \| ([0-9.]+) ms/step \| ([0-9.]+) tok/s \| )"
                      R"(([0-9.]+) TFLOP/s per rank \| MFU ([0-9.]+)%)");
  std::smatch m;
  if (!std::regex_search(out, m, re)) return {};
  return {std::stod(m[1]), std::stod(m[2]), std::stod(m[3]), std::stod(m[4])};
}

void expect_figures_follow_flop_formula(int np, const std::vector<std::string>& layout, bool tied) {
  auto sets = layout;
  sets.push_back(fmt::format("runtime.peak_tflops={}", kPeakTflops));
  sets.push_back(fmt::format("model.tie_embeddings={}", tied));
  const TrainOutput run = run_train(np, kTinyTextDeck, sets);
  ASSERT_EQ(run.rc, 0) << run.out;
  ASSERT_EQ(run.steps.size(), 4u) << run.out;
  const double flops_per_step = training_flops_per_token() * kTokensPerStep;
  double total_ms = 0;
  for (const auto& s : run.steps) {
    const double ms = s.at("step_ms").get<double>();
    total_ms += ms;
    const double tflops = flops_per_step / (ms / 1e3) / 1e12 / np;  // per rank
    EXPECT_NEAR(s.at("tflops").get<double>(), tflops, 1e-9 * tflops) << s.dump();
    EXPECT_NEAR(s.at("mfu").get<double>(), tflops / kPeakTflops, 1e-9 * tflops / kPeakTflops) << s.dump();
    const double tokens_per_s = kTokensPerStep / (ms / 1e3);
    EXPECT_NEAR(s.at("tokens_per_s").get<double>(), tokens_per_s, 1e-9 * tokens_per_s) << s.dump();
  }
  // The summary: means over the steps, as printed (rounded to the printed digits).
  const double mean_ms = total_ms / 4;
  const double tflops = flops_per_step / (mean_ms / 1e3) / 1e12 / np;
  const Summary sum = parse_summary(run.out);
  ASSERT_GT(sum.ms_per_step, 0) << "no summary line\n" << run.out;
  EXPECT_NEAR(sum.ms_per_step, mean_ms, 0.05 + 1e-9 * mean_ms) << run.out;
  EXPECT_NEAR(sum.tokens_per_s, kTokensPerStep / (mean_ms / 1e3), 0.5 + 1e-9 * kTokensPerStep / mean_ms) << run.out;
  EXPECT_NEAR(sum.tflops, tflops, 0.0005 + 1e-9 * tflops) << run.out;
  EXPECT_NEAR(sum.mfu_percent, 100 * tflops / kPeakTflops, 0.05 + 1e-9 * tflops / kPeakTflops) << run.out;
}

TEST(ThroughputReport, SerialFiguresFollowTheFlopFormula) { expect_figures_follow_flop_formula(1, {}, true); }

TEST(ThroughputReport, UntiedHeadCountsTheSameGemms) { expect_figures_follow_flop_formula(1, {}, false); }

// Per rank: the step's FLOPs are shared by the ranks.
TEST(ThroughputReport, DataParallelFiguresArePerRank) { expect_figures_follow_flop_formula(2, {"mesh.dp=2"}, true); }

}  // namespace
}  // namespace trident::test
