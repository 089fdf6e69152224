// Time model: bubble formulas, collective costs and FLOP counts against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.hpp"
#include "model/flops.hpp"
#include "planner/search.hpp"
#include "planner/time_model.hpp"
#include "planner_test_util.hpp"

namespace trident::planner {
namespace {

// Narayanan et al. 2021, Sec. 2.2: bubble fraction (p-1)/m; interleaved (p-1)/(v*m).
TEST(TimeModel, BubbleFractions) {
  EXPECT_DOUBLE_EQ(pipeline_bubble_fraction(Schedule::OneFOneB, 4, 8, 1), 3.0 / 8);
  EXPECT_DOUBLE_EQ(pipeline_bubble_fraction(Schedule::GPipe, 4, 8, 1), 3.0 / 8);
  EXPECT_DOUBLE_EQ(pipeline_bubble_fraction(Schedule::Interleaved, 4, 8, 2), 3.0 / 16);
  EXPECT_DOUBLE_EQ(pipeline_bubble_fraction(Schedule::Interleaved, 4, 16, 4), 3.0 / 64);
  EXPECT_DOUBLE_EQ(pipeline_bubble_fraction(Schedule::OneFOneB, 16, 192, 1), 15.0 / 192);  // 0.078125
  EXPECT_DOUBLE_EQ(pipeline_bubble_fraction(Schedule::OneFOneB, 64, 384, 1), 63.0 / 384);
  EXPECT_DOUBLE_EQ(pipeline_bubble_fraction(Schedule::OneFOneB, 1, 8, 1), 0.0);
  // v only counts for the interleaved schedule.
  EXPECT_DOUBLE_EQ(pipeline_bubble_fraction(Schedule::OneFOneB, 4, 8, 2), 3.0 / 8);
}

// Ring collectives: all-reduce moves 2(n-1)/n of the buffer per rank, all-gather (n-1)/n; each step
// costs one latency. 1 GB over 8 ranks at 100 GB/s, 10 us: 2*7/8*10 ms + 14*10 us = 17.64 ms.
TEST(TimeModel, Collectives) {
  const LinkSpec link{100.0, 10.0};
  EXPECT_NEAR(allreduce_seconds(1e9, 8, link), 0.0175 + 14e-5, 1e-12);
  EXPECT_NEAR(allgather_seconds(1e9, 8, link), 0.00875 + 7e-5, 1e-12);
  EXPECT_NEAR(reduce_scatter_seconds(1e9, 8, link), 0.00875 + 7e-5, 1e-12);
  EXPECT_NEAR(p2p_seconds(1e9, link), 0.01 + 1e-5, 1e-12);
  EXPECT_EQ(allreduce_seconds(1e9, 1, link), 0.0);
  // All-gather + reduce-scatter (sequence parallelism) costs what one all-reduce costs.
  EXPECT_NEAR(allgather_seconds(1e8, 8, link) + reduce_scatter_seconds(1e8, 8, link), allreduce_seconds(1e8, 8, link),
              1e-15);
}

// Narayanan et al. 2021, eq. (3) without recompute (72 instead of 96): FLOPs per step
// = 72 B s l h^2 (1 + s/(6h) + V/(12 l h)) for ffn = 4h; its attention term s/(6h) counts all s^2
// products of QK^T and AV, of which the causal mask leaves half: s/(12h), llm.c's 6LTd (model/flops.hpp).
// Our count (shared with the training summary) sums the GEMMs one by one.
TEST(TimeModel, ModelFlopsMatchNarayananClosedFormWithTheCausalDiscount) {
  const Config cfg = test::gpt3_175b();
  const double B = 1536, s = 2048, l = 96, h = 12288, V = 51200;
  const double closed = 72 * B * s * l * h * h * (1 + s / (12 * h) + V / (12 * l * h));
  EXPECT_NEAR(model_flops_per_token(cfg.model) * B * s / closed, 1.0, 1e-12);
  // Per layer forward for one sequence: 24 s h^2 + 2 s^2 h.
  EXPECT_DOUBLE_EQ(layer_forward_flops(cfg.model, s), 24 * s * h * h + 2 * s * s * h);
}

// llm.c's MFU numerator for GPT-2 124M at T 1024 (its gpt2_estimate_mfu: 6N + 6LTd per token, N =
// 124,475,904 with the vocabulary padded to 50304, the published parameter count of its d12 model)
// against ours, which leaves out the embedding lookups (wte beyond the LM head's padding, wpe),
// LayerNorms and biases: 0.7% fewer.
TEST(TimeModel, ModelFlopsAgainstLlmcFormulaForGpt2Small) {
  Config cfg;
  cfg.model.vocab_size = 50257;
  cfg.model.seq_len = 1024;
  cfg.model.layers = 12;
  cfg.model.hidden = 768;
  cfg.model.heads = 12;
  cfg.model.ffn_hidden = 4 * 768;
  const double llmc = 6.0 * 124475904 + 6.0 * 12 * 1024 * 768;
  // The non-GEMM parameters: wpe 1024*768, LayerNorms 2*768 per norm (2 per layer and the final one),
  // biases 3*768 + 768 + 4*768 + 768 per layer; and the 47 padded vocabulary rows, 47*768.
  const double non_gemm = 1024.0 * 768 + 25 * 2 * 768 + 12 * 9 * 768 + 47 * 768;
  EXPECT_NEAR(model_flops_per_token(cfg.model), llmc - 6 * non_gemm, 1.0);
}

TEST(TimeModel, GemmRateSaturates) {
  ClusterSpec c = cluster_preset("a100-80g");
  c.gemm_half_gflop = 1.0;
  c.gemm_efficiency = 0.8;
  TrainConfig bf16, fp32;
  bf16.precision = Precision::BF16;
  EXPECT_NEAR(gemm_rate(c, bf16, 1e9), 312e12 * 0.8 * 0.5, 1.0);
  EXPECT_NEAR(gemm_rate(c, bf16, 1e15), 312e12 * 0.8, 312e12 * 1e-5);
  EXPECT_NEAR(gemm_rate(c, fp32, 1e9), 19.5e12 * 0.8 * 0.5, 1.0);
  // Without a bf16 peak (the cpu preset) bf16 training's GEMMs run as the CPU backend runs them: fp32.
  ClusterSpec cpu = cluster_preset("cpu");
  EXPECT_DOUBLE_EQ(gemm_rate(cpu, bf16, 1e9), gemm_rate(cpu, fp32, 1e9));
  cpu.peak_tflops_fp32 = 0;
  EXPECT_THROW(gemm_rate(cpu, bf16, 1e9), Error);
}

// fp32 training with bf16 or TF32 GEMM operands (train.matmul_precision): the GEMMs run on tensor
// cores, at the bf16 peak or half of it (A100: 312 and 156 dense TFLOP/s).
TEST(TimeModel, GemmRateFollowsTheMatmulPrecision) {
  ClusterSpec c = cluster_preset("a100-80g");
  c.gemm_half_gflop = 0.0;
  c.gemm_efficiency = 1.0;
  TrainConfig t;
  t.matmul_precision = MatmulPrecision::BF16;
  EXPECT_NEAR(gemm_rate(c, t, 1e12), 312e12, 1.0);
  t.matmul_precision = MatmulPrecision::TF32;
  EXPECT_NEAR(gemm_rate(c, t, 1e12), 156e12, 1.0);
  t.matmul_precision = MatmulPrecision::FP32;
  EXPECT_NEAR(gemm_rate(c, t, 1e12), 19.5e12, 1.0);
  // Without tensor cores (the cpu preset has no bf16 peak) the rounded operands take the fp32 GEMM.
  ClusterSpec cpu = cluster_preset("cpu");
  cpu.gemm_half_gflop = 0.0;
  cpu.gemm_efficiency = 1.0;
  EXPECT_NEAR(gemm_rate(cpu, t, 1e12), cpu.peak_tflops_fp32 * 1e12, 1.0);
}

// MFU's peak is that of the units the GEMMs run on (gemm_rate's choice): fp32 training with bf16 or TF32
// operands on tensor cores is measured against the bf16 peak, exact fp32 against the fp32 peak, and on a
// cluster without tensor cores rounded operands against the fp32 peak.
TEST(TimeModel, MfuPeakFollowsTheMatmulPrecision) {
  Config cfg = test::gpt3_175b();
  cfg.train.precision = Precision::FP32;
  const Layout l{8, 16, 8, 1, Schedule::OneFOneB, 1, 1, Recompute::Selective, true};
  const ClusterSpec a100 = cluster_preset("a100-80g"), cpu = cluster_preset("cpu");
  cfg.train.matmul_precision = MatmulPrecision::BF16;
  EXPECT_EQ(evaluate(cfg, a100, l).time.peak_tflops, 312);
  EXPECT_EQ(evaluate(cfg, cpu, l).time.peak_tflops, cpu.peak_tflops_fp32);
  cfg.train.matmul_precision = MatmulPrecision::TF32;
  EXPECT_EQ(evaluate(cfg, a100, l).time.peak_tflops, 312);
  cfg.train.matmul_precision = MatmulPrecision::FP32;
  EXPECT_EQ(evaluate(cfg, a100, l).time.peak_tflops, 19.5);
}

// The step is m clocks plus the bubble plus the tail, and the bubble is the formula times m clocks.
TEST(TimeModel, StepIsPipelinePlusBubblePlusTail) {
  const Config cfg = test::gpt3_175b();
  const ClusterSpec a100 = cluster_preset("a100-80g");
  for (Schedule sched : {Schedule::OneFOneB, Schedule::GPipe, Schedule::Interleaved}) {
    Layout l{8, 16, 8, 1, sched, sched == Schedule::Interleaved ? 2 : 1, 1, Recompute::Selective, true};
    const LayoutEstimate e = evaluate(cfg, a100, l);
    const TimeBreakdown& t = e.time;
    const double m = 192;
    EXPECT_EQ(t.micro_batches, 192);
    const int v = sched == Schedule::Interleaved ? 2 : 1;
    EXPECT_DOUBLE_EQ(t.bubble_fraction, 15.0 / (v * m));
    EXPECT_NEAR(t.pp_bubble, 15.0 / v * t.per_microbatch, 1e-9 * t.step);
    EXPECT_NEAR(t.step, m * t.per_microbatch + t.pp_bubble + t.after_flush, 1e-9 * t.step);
    EXPECT_NEAR(e.tokens_per_s, 1536.0 * 2048 / t.step, 1e-6 * e.tokens_per_s);
    EXPECT_NEAR(e.tflops_per_gpu, t.model_flops / t.step / 1024 / 1e12, 1e-9);
    EXPECT_NEAR(e.mfu, e.tflops_per_gpu / 312, 1e-12);
    EXPECT_GT(e.hfu, e.mfu);  // selective recompute repeats the attention core
    EXPECT_GT(e.mfu, 0.2);
    EXPECT_LT(e.mfu, 0.75);
  }
}

// Per-layer TP volume: 4 all-reduces of b*s*h elements per layer per micro-batch (2 forward, 2 backward).
TEST(TimeModel, TensorParallelCommunicationVolume) {
  Config cfg = test::gpt2_small_calibration();
  ClusterSpec c = cluster_preset("a100-80g");
  c.intra_node.latency_us = 0;
  c.inter_node.latency_us = 0;
  Layout l{2, 1, 1, 2, Schedule::OneFOneB, 1, 0, Recompute::None, false};
  const LayoutEstimate e = evaluate(cfg, c, l);
  const double M = 4.0 * 2 * 64 * 768;  // fp32, b=2, s=64, h=768
  const double per_layer = 4 * allreduce_seconds(M, 2, c.intra_node);
  const double edges = 2 * allreduce_seconds(M, 2, c.intra_node) + 3 * allreduce_seconds(4.0 * 2 * 64, 2, c.intra_node);
  EXPECT_NEAR(e.time.stages[0].tp_comm, 12 * per_layer + edges, 1e-15);
  l.recompute = Recompute::Full;  // the recomputed forward repeats its 2 all-reduces
  EXPECT_NEAR(evaluate(cfg, c, l).time.stages[0].tp_comm, 12 * 1.5 * per_layer + edges, 1e-15);
}

// Data parallelism: the gradient all-reduce is hidden behind the last backward except its last bucket.
TEST(TimeModel, DataParallelOverlap) {
  Config cfg = test::gpt2_small_calibration();
  const ClusterSpec c = cluster_preset("a100-80g");
  Layout l{1, 1, 8, 1, Schedule::OneFOneB, 1, 0, Recompute::None, false};
  const LayoutEstimate e = evaluate(cfg, c, l);
  const double g = e.memory.stages[0].params * 4;
  EXPECT_NEAR(e.time.dp_comm, allreduce_seconds(g, 8, c.intra_node), 1e-12);
  EXPECT_LE(e.time.dp_comm_exposed, e.time.dp_comm);
  EXPECT_GE(e.time.dp_comm_exposed, allreduce_seconds(std::min(g, 25 * 1048576.0), 8, c.intra_node) - 1e-12);
  // ZeRO-1 adds the parameter all-gather after the step; ZeRO-2 reduce-scatters instead of all-reducing.
  l.zero = 1;
  const LayoutEstimate z1 = evaluate(cfg, c, l);
  EXPECT_NEAR(z1.time.zero_allgather, allgather_seconds(g, 8, c.intra_node), 1e-12);
  l.zero = 2;
  const LayoutEstimate z2 = evaluate(cfg, c, l);
  EXPECT_NEAR(z2.time.dp_comm, reduce_scatter_seconds(g, 8, c.intra_node), 1e-12);
  EXPECT_LT(z2.memory_gb, z1.memory_gb);
  EXPECT_LT(z1.memory_gb, e.memory_gb);
}

TEST(TimeModel, OversubscribedCpuIsSlowerPerRank) {
  const Config cfg = test::gpt2_small_calibration();
  const ClusterSpec cpu = cluster_preset("cpu");
  const LayoutEstimate one = evaluate(cfg, cpu, Layout{1, 1, 1, 2});
  const LayoutEstimate dp2 = evaluate(cfg, cpu, Layout{1, 1, 2, 2});
  const LayoutEstimate all8 = evaluate(cfg, cpu, Layout{2, 2, 2, 2});
  EXPECT_DOUBLE_EQ(all8.time.oversubscription, 4.0);
  // Two cores: dp 2 does half the work per rank at full speed; 8 ranks on 2 cores cannot beat 2 ranks.
  EXPECT_LT(dp2.step_s, one.step_s);
  EXPECT_GT(all8.step_s, dp2.step_s);
}

}  // namespace
}  // namespace trident::planner
