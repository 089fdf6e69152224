// Memory model against published worked examples and hand-computed values. Expected figures come from
// the papers / the seeds or from arithmetic written out here, never from the program's own output.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "model/parameters.hpp"
#include "model/shapes.hpp"
#include "planner/memory_model.hpp"
#include "planner/search.hpp"
#include "planner_test_util.hpp"

namespace trident::planner {
namespace {

// --- The seed's GPT-3 175B example: tp 8, pp 16, dp 8 on 1024 A100-80GB, no ZeRO ------------------------
// The seed's figures are reproduced by 175e9 / (tp*pp) = 175e9/128 = 1.3672e9 parameters per GPU and
// decimal gigabytes (1 GB = 1e9 bytes):
//   parameters  2 bytes  x 1.3672e9 = 2.734e9  -> "2.7 GB"   (in GiB it would be 2.55)
//   gradients   2 bytes  x 1.3672e9 = 2.734e9  -> "2.7 GB"
//   Adam state 12 bytes  x 1.3672e9 = 16.41e9  -> "16.4 GB"  (in GiB it would be 15.3)
// (fp32 master weights 4 + momentum 4 + variance 4 = 12 bytes/param of fp32 state.)
TEST(MemoryModel, Gpt3SeedAccountingPerGpu) {
  const double params = 175e9 / 128;
  const ModelStateBytes s = model_state_bytes(params, Precision::BF16, /*zero=*/0, /*dp=*/8);
  EXPECT_NEAR(s.parameters / 1e9, 2.7, 0.05);
  EXPECT_NEAR(s.gradients / 1e9, 2.7, 0.05);
  EXPECT_NEAR(s.optimizer() / 1e9, 16.4, 0.05);
  EXPECT_DOUBLE_EQ(s.parameters, 2.734375e9);
  EXPECT_DOUBLE_EQ(s.optimizer(), 16.40625e9);
  // Binary units would not give the seed's numbers.
  EXPECT_GT(std::abs(s.parameters / 1073741824.0 - 2.7), 0.1);
}

// The same accounting on the real layer partition: a middle stage of 96/16 = 6 layers holds
// 6 * (12h^2 + 13h) / 8 = 1.359e9 parameters (h = 12288) plus a few replicated LayerNorm/bias vectors.
TEST(MemoryModel, Gpt3MiddleStageMatchesTheSeed) {
  const Config cfg = test::gpt3_175b();
  const Layout l = layout_of(cfg);
  const double h = 12288;
  const double hand = 6 * (12 * h * h + 13 * h) / 8;  // all split across TP, the upper bound
  const double p = stage_params_per_rank(cfg.model, l, 5, 6);
  EXPECT_NEAR(p, hand, 6 * 6 * h);  // replicated vectors: 6h per layer at most differ
  const ModelStateBytes s = model_state_bytes(p, Precision::BF16, 0, 8);
  EXPECT_NEAR(s.parameters / 1e9, 2.7, 0.05);
  EXPECT_NEAR(s.gradients / 1e9, 2.7, 0.05);
  EXPECT_NEAR(s.optimizer() / 1e9, 16.4, 0.1);
  // The whole estimate on a100-80g: the seed's layout fits 80 GB.
  Config c = cfg;
  c.mesh.zero = 0;
  c.train.recompute = Recompute::Full;
  const LayoutEstimate e = evaluate(c, cluster_preset("a100-80g"), layout_of(c));
  EXPECT_TRUE(e.fits) << e.memory_gb;
  EXPECT_EQ(e.placement.nodes, 128);
}

// --- ZeRO paper (Rajbhandari et al. 2020, Sec. 1 / Figure 1): 7.5B parameters, Nd = 64, K = 12 ---------
//   baseline  (2 + 2 + K) * psi            = 16 * 7.5e9           = 120 GB
//   P_os      (2 + 2) * psi + K * psi / Nd = 30e9 + 90e9/64       = 31.4 GB
//   P_os+g    2 * psi + (2 + K) * psi / Nd = 15e9 + 105e9/64      = 16.6 GB
TEST(MemoryModel, ZeroPaperExample) {
  const double psi = 7.5e9;
  EXPECT_NEAR(model_state_bytes(psi, Precision::BF16, 0, 64).total() / 1e9, 120.0, 1e-9);
  EXPECT_NEAR(model_state_bytes(psi, Precision::BF16, 1, 64).total() / 1e9, 31.4, 0.05);
  EXPECT_NEAR(model_state_bytes(psi, Precision::BF16, 2, 64).total() / 1e9, 16.6, 0.05);
  EXPECT_DOUBLE_EQ(model_state_bytes(psi, Precision::BF16, 1, 64).total(), 30e9 + 90e9 / 64);
  EXPECT_DOUBLE_EQ(model_state_bytes(psi, Precision::BF16, 2, 64).total(), 15e9 + 105e9 / 64);
  // Stage 3 (P_os+g+p in the paper's Figure 1): everything / Nd = 120 GB / 64 = 1.9 GB.
  EXPECT_NEAR(model_state_bytes(psi, Precision::BF16, 3, 64).total() / 1e9, 1.9, 0.05);
  EXPECT_DOUBLE_EQ(model_state_bytes(psi, Precision::BF16, 3, 64).total(), 120e9 / 64);
}

TEST(MemoryModel, Fp32StatesAndZeroShards) {
  // fp32: 4 (weights) + 4 (gradients) + 8 (Adam m, v), no master copy.
  const ModelStateBytes s0 = model_state_bytes(1e6, Precision::FP32, 0, 4);
  EXPECT_DOUBLE_EQ(s0.parameters, 4e6);
  EXPECT_DOUBLE_EQ(s0.gradients, 4e6);
  EXPECT_DOUBLE_EQ(s0.master_weights, 0);
  EXPECT_DOUBLE_EQ(s0.optimizer_moments, 8e6);
  const ModelStateBytes s1 = model_state_bytes(1e6, Precision::FP32, 1, 4);
  EXPECT_DOUBLE_EQ(s1.optimizer_moments, 2e6);
  EXPECT_DOUBLE_EQ(s1.gradients, 4e6);
  const ModelStateBytes s2 = model_state_bytes(1e6, Precision::FP32, 2, 4);
  EXPECT_DOUBLE_EQ(s2.gradients, 1e6);
  EXPECT_DOUBLE_EQ(s2.parameters, 4e6);
  const ModelStateBytes s3 = model_state_bytes(1e6, Precision::FP32, 3, 4);
  EXPECT_DOUBLE_EQ(s3.parameters, 1e6);
  EXPECT_DOUBLE_EQ(s3.gradients, 1e6);
  EXPECT_DOUBLE_EQ(s3.optimizer_moments, 2e6);
}

// ZeRO-2/3 buffers beside the partitions, GPT-2 124M (h 768, vocabulary 50257 stored padded to 50304 by
// the default model.vocab_pad_to, 128) in fp32: the token embedding segment 50304*768, a layer 12h^2 + 13h (c_attn 3h^2+3h, attn.c_proj h^2+h, c_fc
// 4h^2+4h, mlp.c_proj 4h^2+h, two LayerNorms 4h). Staging: the largest segment + one layer; a tied
// embedding shared by two stages adds its whole gradient on both. Gathered parameters: the largest
// segment + one layer (the one in use and the next prefetched).
TEST(MemoryModel, ZeroStagingAndGatherBuffers) {
  Config cfg = test::gpt2_small_calibration();
  Layout l = layout_of(cfg);
  const double h = 768, wte = 50304 * h, layer = 12 * h * h + 13 * h;
  EXPECT_DOUBLE_EQ(layer_params_per_rank(cfg.model, 1), layer);
  EXPECT_DOUBLE_EQ(zero2_gradient_staging_bytes(cfg.model, l, 0, 4), 4 * (wte + layer));
  EXPECT_DOUBLE_EQ(zero3_parameter_gather_bytes(cfg.model, l, 4), 4 * (wte + layer));
  l.pp = 4;
  EXPECT_DOUBLE_EQ(zero2_gradient_staging_bytes(cfg.model, l, 0, 4), 4 * (wte + layer + wte));
  EXPECT_DOUBLE_EQ(zero2_gradient_staging_bytes(cfg.model, l, 1, 4), 4 * (layer + layer));
  EXPECT_DOUBLE_EQ(zero2_gradient_staging_bytes(cfg.model, l, 3, 4), 4 * (wte + layer + wte));
}

// --- Korthikanti et al. 2022, Sec. 4 (16-bit activations, dropout), s=2048 b=1 h=12288 a=96 t=8 ------
// sbh = 2048 * 12288 = 25,165,824; 5as/h = 5*96*2048/12288 = 80; 5as/(ht) = 10.
ActivationShape gpt3_shape(int t, bool sp) {
  ActivationShape a;
  a.seq = 2048;
  a.micro_batch = 1;
  a.hidden = 12288;
  a.heads = 96;
  a.tp = t;
  a.sequence_parallel = sp;
  a.elem_bytes = 2;
  a.dropout = true;
  return a;
}

TEST(MemoryModel, KorthikantiPerLayerFormulas) {
  // No parallelism: sbh(34 + 5as/h) = 25,165,824 * 114.
  EXPECT_DOUBLE_EQ(layer_activation_bytes(gpt3_shape(1, false), Recompute::None), 2868903936.0);
  // Tensor parallel: sbh(10 + 24/t + 5as/(ht)) = 25,165,824 * (10 + 3 + 10) = * 23.
  EXPECT_DOUBLE_EQ(layer_activation_bytes(gpt3_shape(8, false), Recompute::None), 578813952.0);
  // Tensor + sequence parallel: sbh(34/t + 5as/(ht)) = 25,165,824 * (4.25 + 10) = * 14.25.
  EXPECT_DOUBLE_EQ(layer_activation_bytes(gpt3_shape(8, true), Recompute::None), 358612992.0);
  // Tensor parallel + selective recompute: sbh(10 + 24/t) = * 13.
  EXPECT_DOUBLE_EQ(layer_activation_bytes(gpt3_shape(8, false), Recompute::Selective), 327155712.0);
  // Tensor + sequence parallel + selective recompute: sbh * 34/t = * 4.25.
  EXPECT_DOUBLE_EQ(layer_activation_bytes(gpt3_shape(8, true), Recompute::Selective), 106954752.0);
  // Full recompute: only the layer input, 2sbh (2sbh/t when it is sequence-parallel).
  EXPECT_DOUBLE_EQ(layer_activation_bytes(gpt3_shape(8, false), Recompute::Full), 50331648.0);
  EXPECT_DOUBLE_EQ(layer_activation_bytes(gpt3_shape(8, true), Recompute::Full), 6291456.0);
  // t = 1 with selective: sbh * 34.
  EXPECT_DOUBLE_EQ(layer_activation_bytes(gpt3_shape(1, false), Recompute::Selective), 855638016.0);
}

// Trident's own case: fp32 activations, no dropout, ffn = 4h. Per tensor: 4 LN inputs/outputs (16 bytes
// per sbh), Q K V and projection input (16), GELU input and output (2 * 4h * 4 = 32), scores a*s^2*b * 4.
// s=64 b=4 h=768 a=12 t=1: sbh = 196,608; 64 * 196,608 = 12,582,912; 4*12*64*64*4 = 786,432.
TEST(MemoryModel, TridentFp32NoDropout) {
  ActivationShape a;
  a.seq = 64;
  a.micro_batch = 4;
  a.hidden = 768;
  a.heads = 12;
  a.elem_bytes = 4;
  a.dropout = false;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(a, Recompute::None), 12582912.0 + 786432.0);
  EXPECT_DOUBLE_EQ(layer_activation_bytes(a, Recompute::Selective), 12582912.0);
  EXPECT_DOUBLE_EQ(layer_activation_bytes(a, Recompute::Full), 4.0 * 196608);
  a.tp = 2;  // replicated 16, split 48/2 = 24, scores halved
  EXPECT_DOUBLE_EQ(layer_activation_bytes(a, Recompute::None), 40.0 * 196608 + 393216.0);
  // Flash-style attention keeps the fp32 log-sum-exp of each row, a*s*b = 12*64*4 values (over t = 2),
  // instead of the scores.
  a.flash_attention = true;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(a, Recompute::None), 40.0 * 196608 + 4.0 * 12 * 64 * 4 / 2);
  EXPECT_DOUBLE_EQ(layer_activation_bytes(a, Recompute::Selective), 40.0 * 196608);
}

// trident's bf16 (train.precision, model/gpt.hpp): the LN inputs (the residual stream) stay fp32, 8 bytes
// per sbh; LN outputs 2 * 2, Q K V and projection input 4 * 2, GELU input and output 2 * 4h * 2 = 16: 36
// per sbh at t = 1; the log-sum-exp fp32. At t = 2: replicated 12, split 24 / 2 = 12. Full recompute keeps
// the fp32 layer input. Model states: fp32 (its parameters are AdamW's masters).
TEST(MemoryModel, TridentBf16KeepsTheResidualStreamInFp32) {
  const StorageBytes bytes = storage_bytes(Precision::BF16);
  EXPECT_EQ(bytes.saved_activation, 2);
  EXPECT_EQ(bytes.residual, 4);
  EXPECT_EQ(bytes.communicated, 4);
  EXPECT_EQ(storage_bytes(Precision::FP32).saved_activation, 4);
  ActivationShape a;
  a.seq = 64;
  a.micro_batch = 4;
  a.hidden = 768;
  a.heads = 12;
  a.elem_bytes = bytes.saved_activation;
  a.residual_bytes = bytes.residual;
  a.dropout = false;
  a.flash_attention = true;
  const double sbh = 196608, lse = 4.0 * 12 * 64 * 4;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(a, Recompute::None), 36.0 * sbh + lse);
  EXPECT_DOUBLE_EQ(layer_activation_bytes(a, Recompute::Full), 4.0 * sbh);
  a.tp = 2;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(a, Recompute::None), 24.0 * sbh + lse / 2);
}

// mesh.grad_reduce_dtype = "bf16": under zero 0 and 1 the reducer keeps the gradients' bf16 patterns
// beside them, 2 bytes per parameter counted with the gradients; under zero 2 each staging buffer has a
// bf16 companion, so the staging (the token embedding's segment and a layer's, on this pp 1 stage:
// data_parallel/sharded_gradients.hpp) costs 6 bytes per element instead of 4. The layout search
// considers zero 2 with it.
TEST(MemoryModel, Bf16GradientReductionKeepsTheGradientsPatterns) {
  Config cfg = test::gpt2_small_calibration();
  const ClusterSpec cluster = cluster_preset("cpu");
  Layout l = layout_of(cfg);
  l.dp = 2;
  l.zero = 1;
  const auto stage = [&](const Config& c) {
    return estimate_memory(c, cluster, l, place(cluster, l, c.mesh.order)).stages.at(0);
  };
  Config bf16 = cfg;
  bf16.mesh.grad_reduce_dtype = Precision::BF16;
  EXPECT_DOUBLE_EQ(stage(bf16).states.gradients - stage(cfg).states.gradients, 2.0 * stage(cfg).params);
  l.zero = 2;
  const double C = 768, wte = 50304 * C, layer = 12 * C * C + 13 * C;  // 50257 padded (vocab_pad_to 128)
  EXPECT_DOUBLE_EQ(stage(bf16).states.gradients, stage(cfg).states.gradients);
  EXPECT_DOUBLE_EQ(stage(bf16).comm_buffers - stage(cfg).comm_buffers, 2.0 * (wte + layer));
  bf16.mesh.dp = 2;
  bool zero2 = false;
  for (const auto& e : search(bf16, cluster, SearchPins{})) zero2 = zero2 || e.layout.zero == 2;
  EXPECT_TRUE(zero2) << "the search left zero 2 out under a bf16 reduction";
}

// The last stage's LM head: each micro-batch alive keeps its final LayerNorm input and that input's
// gradient (a slot's top residual and dtop, model/gpt.cpp), but the head's gathered input and its chunk
// of logits are the model's own, one set whatever the schedule, since a micro-batch's head runs forward
// and backward at once. GPipe with 8 micro-batches at pp 2 keeps 8 slots there, 1F1B one: the stages'
// head activations differ by 7 x 2 x 4 bytes x s b h, not by 7 sets of logits (50257 x 64 x 2 x 4 bytes,
// 26 MB each at this shape).
TEST(MemoryModel, LastStageKeepsOneSetOfLogitsWhateverTheSchedule) {
  Config cfg = test::gpt2_small_calibration();  // seq 64, micro-batch 2, hidden 768
  cfg.mesh.pp = 2;
  cfg.train.global_batch = 16;
  const ClusterSpec cluster = cluster_preset("cpu");
  const auto last_stage_edge = [&](Schedule schedule) {
    Config c = cfg;
    c.mesh.schedule = schedule;
    const Layout l = layout_of(c);
    return estimate_memory(c, cluster, l, place(cluster, l, c.mesh.order)).stages.at(1).edge_activations;
  };
  const double sbh = 64.0 * 2 * 768;
  EXPECT_DOUBLE_EQ(last_stage_edge(Schedule::GPipe) - last_stage_edge(Schedule::OneFOneB), 7 * 2 * 4.0 * sbh);
}

// In-flight micro-batches: GPipe holds m, 1F1B holds pp - stage (Narayanan et al. 2021), interleaved
// stage 0 holds pp * (1 + (pp-1)/(v*pp)) micro-batch equivalents (Korthikanti Sec. 4.2.3):
// pp 4, v 2: 4 * (1 + 3/8) = 5.5.
TEST(MemoryModel, MicroBatchesInFlight) {
  EXPECT_EQ(microbatches_in_flight(Schedule::GPipe, 4, 0, 8, 1), 8);
  EXPECT_EQ(microbatches_in_flight(Schedule::GPipe, 4, 3, 8, 1), 8);
  EXPECT_EQ(microbatches_in_flight(Schedule::OneFOneB, 4, 0, 8, 1), 4);
  EXPECT_EQ(microbatches_in_flight(Schedule::OneFOneB, 4, 1, 8, 1), 3);
  EXPECT_EQ(microbatches_in_flight(Schedule::OneFOneB, 4, 3, 8, 1), 1);
  EXPECT_EQ(microbatches_in_flight(Schedule::OneFOneB, 4, 0, 2, 1), 2);  // fewer micro-batches than stages
  EXPECT_EQ(microbatches_in_flight(Schedule::OneFOneB, 1, 0, 8, 1), 1);
  EXPECT_DOUBLE_EQ(microbatches_in_flight(Schedule::Interleaved, 4, 0, 8, 2), 5.5);
  EXPECT_DOUBLE_EQ(microbatches_in_flight(Schedule::Interleaved, 16, 0, 192, 3), 16 * (1 + 15.0 / 48));
}

TEST(MemoryModel, StageLayersAndEdgeParameters) {
  Config cfg = test::gpt3_175b();
  Layout l = layout_of(cfg);
  EXPECT_EQ(stage_layers(cfg, l), std::vector<int64_t>(16, 6));
  l.pp = 5;  // 96 = 5*19 + 1: the first stage gets one more
  const auto s = stage_layers(cfg, l);
  EXPECT_EQ(s.front(), 20);
  EXPECT_EQ(s.back(), 19);
  l.pp = 4;
  l.virtual_stages = 3;  // 12 chunks of 8 layers, 3 per stage
  EXPECT_EQ(stage_layers(cfg, l), std::vector<int64_t>(4, 24));
  cfg.mesh.layers_per_stage = {30, 22, 22, 22};
  l.virtual_stages = 1;
  EXPECT_EQ(stage_layers(cfg, l), (std::vector<int64_t>{30, 22, 22, 22}));

  // Embeddings: vocab-parallel wte (51200*12288/8) + replicated wpe (2048*12288) on the first stage;
  // tied head copy (51200*12288/8) + ln_f (2*12288) on the last.
  cfg = test::gpt3_175b();
  l = layout_of(cfg);
  const double layer = layer_params_per_rank(cfg.model, 8);
  EXPECT_DOUBLE_EQ(stage_params_per_rank(cfg.model, l, 0, 6) - 6 * layer, 51200.0 * 12288 / 8 + 2048.0 * 12288);
  EXPECT_DOUBLE_EQ(stage_params_per_rank(cfg.model, l, 15, 6) - 6 * layer, 51200.0 * 12288 / 8 + 2 * 12288);
  // Per layer at tp 8: (3h^2 + 3h + h^2 + 4h^2 + 4h + 4h^2) / 8 + (4h + 2h) replicated.
  const double h = 12288;
  EXPECT_DOUBLE_EQ(layer, (12 * h * h + 7 * h) / 8 + 6 * h);
  // Summed over stages and TP ranks, the partition holds the model's parameters exactly once, plus the
  // tied head copy and the TP-replicated vectors.
  double total = 0;
  for (int s = 0; s < 16; ++s) total += stage_params_per_rank(cfg.model, l, s, 6);
  const double replicated_extra = 7 * (96 * 6 * h + 2048 * h + 2 * h);  // 7 extra copies over TP ranks
  EXPECT_NEAR(total * 8 - replicated_extra - 51200.0 * h, double(parameter_count(cfg.model)), 1.0);
}

// GEMM operand copies on a GPU (gemm_operand_copy_bytes): a bf16 run hands the CUDA GEMMs bf16 patterns
// (kernels.hpp GemmInput), so only what arrives as fp32 is copied. GPT-2 124M (C 768, c_fc 3072) at
// micro-batch 8, seq 1024 (N = 8192 rows), bf16 elements (2 bytes), layers only (not the head stage):
//   working copy, no SP:       dY of c_fc's backward, N x 3072              = 25,165,824 elements
//   bf16_parameters = false:   c_fc's dY + W, 3072 x (8192 + 768)           = 27,525,120
//   matmul_precision "bf16" with fp32 storage (every operand copied): c_fc's X + dY + W,
//                              8192 x 768 + 27,525,120                      = 33,816,576
//   full recompute (no kept patterns) with the working copy: c_fc's X + dY = 6,291,456 + 25,165,824
//   tp 2 + SP (the norm outputs gathered in fp32): c_fc's X 8192 x 768 + dY 8192 x 1536 = 18,874,368
TEST(MemoryModel, GpuGemmCopiesLeaveOutWhatIsReadAsBf16Patterns) {
  const ClusterSpec h100 = cluster_preset("h100-80g");
  Config cfg = test::gpt2_small_calibration();
  cfg.model.seq_len = 1024;
  cfg.runtime.backend = Backend::Cuda;
  cfg.train.precision = Precision::BF16;
  Layout l{1, 1, 1, 8};
  const auto copies = [&](const Config& c, const Layout& lay) { return gemm_operand_copy_bytes(c, h100, lay, false); };
  EXPECT_DOUBLE_EQ(copies(cfg, l), 2.0 * 25165824);
  Config fp32_parameters = cfg;
  fp32_parameters.train.bf16_parameters = false;
  EXPECT_DOUBLE_EQ(copies(fp32_parameters, l), 2.0 * 27525120);
  Config rounded_operands = cfg;
  rounded_operands.train.precision = Precision::FP32;
  rounded_operands.train.matmul_precision = MatmulPrecision::BF16;
  EXPECT_DOUBLE_EQ(copies(rounded_operands, l), 2.0 * 33816576);
  Layout full = l;
  full.recompute = Recompute::Full;
  EXPECT_DOUBLE_EQ(copies(cfg, full), 2.0 * (6291456 + 25165824));
  Layout sp{2, 1, 1, 8};
  sp.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(copies(cfg, sp), 2.0 * 18874368);
}

// --- The seed's 1T example on 4096 A100-80GB with zero = 0 -----------------------------------------------
// tp 8 x pp 64 x dp 8: 2 layers per stage, 2 * 12 * 25600^2 / 8 = 1.97e9 parameters per GPU, 16 bytes
// each = 31.5 GB of model states (trident's bf16: 20 bytes, 39.3 GB): fits with activation recomputation.
// tp 8 x pp 8 x dp 64: 16 layers per stage, 15.7e9 parameters per GPU, 252 GB of model states alone:
// does not fit whatever the micro-batch or recompute mode.
TEST(MemoryModel, OneTrillionSeedExample) {
  const ClusterSpec a100 = cluster_preset("a100-80g");
  Config cfg = test::gpt_1t();
  cfg.mesh.zero = 0;
  // Hand figures for the model states.
  const double h = 25600;
  EXPECT_NEAR(model_state_bytes(2 * 12 * h * h / 8, Precision::BF16, 0, 8).total() / 1e9, 31.5, 0.05);
  EXPECT_NEAR(model_state_bytes(16 * 12 * h * h / 8, Precision::BF16, 0, 64).total() / 1e9, 251.7, 0.1);

  SearchPins fits;
  fits.tp = 8;
  fits.pp = 64;
  fits.dp = 8;
  fits.zero = 0;
  const auto a = search(cfg, a100, fits);
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a.front().fits);
  // The seed's layout as Narayanan et al. ran it (1F1B, micro-batch 1, full recompute) fits.
  Layout l{8, 64, 8, 1, Schedule::OneFOneB, 1, 0, Recompute::Full, false};
  const LayoutEstimate e = evaluate(cfg, a100, l);
  EXPECT_TRUE(e.fits) << e.memory_gb;
  EXPECT_EQ(e.placement.nodes, 512);
  // trident's bf16 keeps 20 bytes per parameter here, not the paper's 16: its working copy in bf16 (2)
  // and one of the stage's two layers widened to fp32 at a time (2 a parameter), the gradients in fp32
  // storage (4), the masters and moments (12): 2 x 12 h^2 / 8 x 20 = 39.3 GB.
  EXPECT_NEAR(e.memory.stages[1].states.total() / 1e9, 39.3, 0.2);

  SearchPins not_fits = fits;
  not_fits.pp = 8;
  not_fits.dp = 64;
  const auto b = search(cfg, a100, not_fits);
  ASSERT_FALSE(b.empty());
  for (const auto& x : b) EXPECT_FALSE(x.fits) << describe(x.layout);
  EXPECT_GT(b.front().memory.peak().states.total() / 1e9, 250);
}

TEST(MemoryModel, PlacementAndOversubscription) {
  // tp-dp-pp on 8-GPU nodes: tp 8 fills a node; DP and PP groups cross nodes.
  EXPECT_TRUE(group_within_node("tp-dp-pp", "tp", 8, 16, 8, 8));
  EXPECT_FALSE(group_within_node("tp-dp-pp", "dp", 8, 16, 8, 8));
  EXPECT_FALSE(group_within_node("tp-dp-pp", "pp", 8, 16, 8, 8));
  // tp 2, dp 4 on one node: both inside; pp outside.
  EXPECT_TRUE(group_within_node("tp-dp-pp", "dp", 2, 2, 4, 8));
  EXPECT_FALSE(group_within_node("tp-dp-pp", "pp", 2, 2, 4, 8));
  // dp first: a TP group strides over dp ranks.
  EXPECT_FALSE(group_within_node("dp-tp-pp", "tp", 8, 1, 8, 8));
  EXPECT_TRUE(group_within_node("dp-tp-pp", "dp", 8, 1, 8, 8));
  // A size-1 group is always inside.
  EXPECT_TRUE(group_within_node("tp-dp-pp", "pp", 8, 1, 8, 8));

  const ClusterSpec cpu = cluster_preset("cpu");
  const Placement p = place(cpu, Layout{2, 2, 2}, "tp-dp-pp");
  EXPECT_EQ(p.nodes, 1);
  EXPECT_EQ(p.ranks_per_node, 8);
  EXPECT_DOUBLE_EQ(p.share, 0.25);
  EXPECT_TRUE(p.tp_intra && p.pp_intra && p.dp_intra);
  const Placement one = place(cpu, Layout{1, 1, 1}, "tp-dp-pp");
  EXPECT_DOUBLE_EQ(one.share, 1.0);
  // A GPU cluster does not oversubscribe.
  ClusterSpec small = cluster_preset("a100-80g");
  small.nodes = 1;
  EXPECT_THROW(place(small, Layout{8, 2, 1}, "tp-dp-pp"), Error);
}


// The planner's parameters per rank of a Llama-shaped model (grouped-query K/V, SwiGLU's three matrices,
// RMSNorm without bias, no position table) against the tensors a rank's ParameterLayout really holds,
// Llama 3 8B's shape (vocabulary unpadded: 128256 is a multiple of every tp here): split kv heads
// (tp 1, 2, 8) and kv heads replicated on 2 ranks (tp 16); with biases too.
TEST(MemoryModel, LlamaParametersPerRankAreTheLayoutsTensors) {
  for (const bool bias : {false, true}) {
    ModelConfig m;
    m.architecture = Architecture::Llama;
    m.vocab_size = 128256;
    m.seq_len = 8192;
    m.layers = 32;
    m.hidden = 4096;
    m.heads = 32;
    m.kv_heads = 8;
    m.ffn_hidden = 14336;
    m.norm = Norm::RmsNorm;
    m.positions = Positions::Rope;
    m.mlp = Mlp::SwiGlu;
    m.bias = bias;
    m.tie_embeddings = false;
    for (const int tp : {1, 2, 8, 16}) {
      SCOPED_TRACE(fmt::format("bias {} tp {}", bias, tp));
      Layout l;
      l.tp = tp;
      const double planned = stage_params_per_rank(m, l, 0, m.layers);
      const ParameterLayout rank0(GptShapes::from(m, tp), 0, tp);
      // Row-parallel biases are replicated but counted once per rank by both.
      EXPECT_DOUBLE_EQ(planned, double(rank0.total()));
    }
  }
}

}  // namespace
}  // namespace trident::planner
