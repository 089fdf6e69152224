// Invariants of the model and the training loop that need no reference implementation:
//   * recompute none / full / selective give bit-identical losses and gradients (the kernels are
//     deterministic and recompute reruns the very same ops on the very same inputs), in fp32 and under
//     bf16 storage (train.precision = "bf16": what backward reads is what forward rounded);
//   * bf16 storage keeps the saved activations in the bytes model/gpt.hpp says, and changes the numbers;
//   * gradient accumulation: 4 micro-batches of 1 sequence give the gradients of 1 micro-batch of 4
//     within 1e-6 relative (norm-wise per tensor). Not bit for bit: each matmul's weight gradient is
//     a sum over the B*T rows of a micro-batch, so 1x4 rounds four partial sums of T rows to float and
//     adds them into the gradient buffer, while 4x1 reduces all 4T rows at once (and a BLAS may
//     block a different N differently): the same terms added in a different order, which moves
//     every gradient by a few float32 roundings (~3e-7 norm-wise here);
//   * determinism: two identical training runs hold bit-identical parameters (and Adam moments)
//     after 3 steps.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/model_inputs.hpp"
#include "common/test_support.hpp"
#include "deck/deck.hpp"
#include "kernels.hpp"
#include "model/gpt.hpp"
#include "model/parameters.hpp"
#include "model/shapes.hpp"
#include "train/trainer.hpp"

namespace trident {
namespace {

ModelConfig small_model(bool tied) {
  ModelConfig m;
  m.vocab_size = 256;
  m.seq_len = 16;
  m.layers = 2;
  m.hidden = 32;
  m.heads = 4;
  m.tie_embeddings = tied;
  m.vocab_pad_to = 1;
  return m;
}

std::vector<float> random_params(const ParameterLayout& layout, double std, uint64_t seed) {
  return test::random_params(layout, std, seed, 0.05f);
}
using test::random_tokens;

struct Result {
  double loss_sum = 0;
  std::vector<float> grads;
};

// `micro_batches` calls of forward_backward on a model of B sequences; the inputs/targets of all
// calls are consecutive in `tokens` ([micro_batches * B * T] each).
// Under bf16 storage the GEMMs take bf16 operands, as the Trainer sets them; `matmul` otherwise.
Result run_model(const GptShapes& s, ActivationPolicy policy, int64_t B, int64_t micro_batches,
                 const std::vector<float>& params, const std::vector<int32_t>& inputs,
                 const std::vector<int32_t>& targets, float dloss_scale, ActivationBytes* bytes = nullptr,
                 MatmulPrecision matmul = MatmulPrecision::FP32) {
  auto k = make_kokkos_kernels();
  k->set_matmul_precision(policy.precision == Precision::BF16 ? MatmulPrecision::BF16 : matmul);
  GptModel model(s, *k, policy, B);
  k->copy_to_device(model.params(), params.data(), int64_t(params.size()));
  k->fill(model.grads(), 0.f, model.layout().total());
  Result r;
  for (int64_t mb = 0; mb < micro_batches; ++mb)
    r.loss_sum += model.forward_backward(inputs.data() + mb * B * s.T, targets.data() + mb * B * s.T, dloss_scale);
  k->fence();
  r.grads.resize(model.layout().total());
  k->copy_to_host(r.grads.data(), model.grads(), model.layout().total());
  if (bytes) *bytes = model.activation_bytes();
  return r;
}

// ||x|| over tensor t's elements of a whole gradient buffer.
double tensor_l2(const ParamTensor& t, const std::vector<float>& x) {
  double r2 = 0;
  for (int64_t i = t.offset; i < t.offset + t.numel; ++i) r2 += double(x[size_t(i)]) * double(x[size_t(i)]);
  return std::sqrt(r2);
}

// ||a - b|| / ||b|| over tensor t's elements of two whole gradient buffers (where b's are all zero: 0 if
// a's are too, else infinity).
double tensor_relative_l2(const ParamTensor& t, const std::vector<float>& a, const std::vector<float>& b) {
  double d2 = 0;
  for (int64_t i = t.offset; i < t.offset + t.numel; ++i) {
    const double d = double(a[size_t(i)]) - double(b[size_t(i)]);
    d2 += d * d;
  }
  const double norm = tensor_l2(t, b);
  if (norm > 0) return std::sqrt(d2) / norm;
  return d2 > 0 ? std::numeric_limits<double>::infinity() : 0.0;
}

TEST(TrainingInvariants, RecomputeModesGiveBitIdenticalLossesAndGradients) {
  for (const auto& [tied, precision] : {std::pair{true, Precision::FP32}, std::pair{false, Precision::FP32},
                                        std::pair{true, Precision::BF16}, std::pair{false, Precision::BF16}}) {
    SCOPED_TRACE(fmt::format("{}, precision {}", tied ? "tied" : "untied", to_string(precision)));
    const GptShapes s = GptShapes::from(small_model(tied));
    const ParameterLayout layout(s);
    const auto params = random_params(layout, 0.1, 11);
    const int64_t B = 2, micro_batches = 2;  // two calls: full recompute reuses its buffers across them
    const auto inputs = random_tokens(micro_batches * B * s.T, s.V, 1);
    const auto targets = random_tokens(micro_batches * B * s.T, s.V, 2);
    const float scale = float(1.0 / double(micro_batches * B * s.T));
    const Result none = run_model(s, {Recompute::None, precision}, B, micro_batches, params, inputs, targets, scale);
    for (const Recompute mode : {Recompute::Full, Recompute::Selective}) {
      SCOPED_TRACE(to_string(mode));
      const Result r = run_model(s, {mode, precision}, B, micro_batches, params, inputs, targets, scale);
      EXPECT_EQ(r.loss_sum, none.loss_sum);
      ASSERT_EQ(r.grads.size(), none.grads.size());
      for (const auto& t : layout.tensors())
        EXPECT_EQ(std::memcmp(r.grads.data() + t.offset, none.grads.data() + t.offset, sizeof(float) * t.numel), 0)
            << "gradient of " << t.name << " differs from recompute none";
    }
  }
}

// bf16 storage: a layer's norm outputs, q|k|v, attention output, MLP pre-activation and activation take 2
// bytes per element in a slot, its residual input, x2, statistics and log-sum-exp 4 (counted here from the
// shapes); the slot also holds the tokens, the output and the head's gradient. Against bf16 GEMM operands
// alone (the same rounding of every GEMM input), the losses and gradients move, by bf16's order (2^-8).
TEST(TrainingInvariants, Bf16StorageKeepsTheSavedActivationsInHalfTheBytes) {
  const GptShapes s = GptShapes::from(small_model(true));
  const ParameterLayout layout(s);
  const auto params = random_params(layout, 0.1, 12);
  const int64_t B = 2, N = B * s.T, C = s.C, L = s.L;
  const auto inputs = random_tokens(N, s.V, 3);
  const auto targets = random_tokens(N, s.V, 4);
  const float scale = float(1.0 / double(N));
  ActivationBytes fp32_bytes, bf16_bytes;
  const Result rounded_operands = run_model(s, {Recompute::None, Precision::FP32}, B, 1, params, inputs, targets,
                                            scale, &fp32_bytes, MatmulPrecision::BF16);
  const Result stored_bf16 =
      run_model(s, {Recompute::None, Precision::BF16}, B, 1, params, inputs, targets, scale, &bf16_bytes);
  const int64_t packed = N * (C + 3 * C + C + C + s.F + s.F);  // ln1, qkv, atty, ln2, fch, fchg
  const int64_t per_layer_fp32 = N * C + 4 * N + s.NH * N;         // x2; two means and rstds; lse
  const int64_t slot_rest = 4 * N * C * (L + 1) + 4 * N + 4 * N * C;  // residuals, tokens, dtop
  EXPECT_EQ(fp32_bytes.saved, slot_rest + L * 4 * (packed + per_layer_fp32));
  EXPECT_EQ(bf16_bytes.saved, slot_rest + L * (2 * packed + 4 * per_layer_fp32));
  std::printf("[bf16 storage] saved bytes per micro-batch: fp32 %lld, bf16 %lld (%.3f)\n", (long long)fp32_bytes.saved,
              (long long)bf16_bytes.saved, double(bf16_bytes.saved) / double(fp32_bytes.saved));
  const double loss_change = std::fabs(stored_bf16.loss_sum - rounded_operands.loss_sum) / rounded_operands.loss_sum;
  EXPECT_GT(loss_change, 0.0) << "bf16 storage changed no bit of the loss";
  EXPECT_LT(loss_change, 1e-2);
  double change = 0;  // the largest ||g_bf16 - g|| / ||g|| over the tensors
  for (const auto& t : layout.tensors())
    change = std::max(change, tensor_relative_l2(t, stored_bf16.grads, rounded_operands.grads));
  EXPECT_GT(change, 1e-4) << "bf16 storage barely changed the gradients";
  EXPECT_LT(change, 5e-2) << "bf16 storage changed the gradients far more than bf16's rounding";
}

// The LM head in chunks of rows (train.logits_chunk_mib): 5 rows of logits at a time over the 32 positions
// of a micro-batch (6 chunks of 5 and one of 2) against all rows at once. Each row's logits, loss and
// input gradient are computed alike; only the head weight's gradient sums the rows in another order (as
// 1 micro-batch of 4 against 4 of 1 below), so losses and gradients agree within 1e-6 relative.
TEST(TrainingInvariants, LogitsInChunksOfRowsGiveTheWholeHeadsLossAndGradients) {
  for (const bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    const GptShapes s = GptShapes::from(small_model(tied));
    const ParameterLayout layout(s);
    const auto params = random_params(layout, 0.1, 13);
    const int64_t B = 2, N = B * s.T;
    const auto inputs = random_tokens(2 * N, s.V, 5);
    const auto targets = random_tokens(2 * N, s.V, 6);
    const float scale = float(1.0 / double(2 * N));
    const int64_t five_rows = 5 * s.Vp * int64_t(sizeof(float)) + 3;
    ASSERT_EQ(logits_chunk_rows(five_rows, s.Vp, N), 5);
    const Result whole = run_model(s, Recompute::None, B, 2, params, inputs, targets, scale);
    const Result chunked = run_model(s, {Recompute::None, Precision::FP32, five_rows}, B, 2, params, inputs, targets, scale);
    EXPECT_NEAR(chunked.loss_sum, whole.loss_sum, 1e-6 * whole.loss_sum);
    for (const auto& t : layout.tensors()) EXPECT_LE(tensor_relative_l2(t, chunked.grads, whole.grads), 1e-6) << t.name;
  }
}

TEST(TrainingInvariants, AccumulatingFourMicroBatchesOfOneMatchesOneOfFour) {
  for (const bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    const GptShapes s = GptShapes::from(small_model(tied));
    const ParameterLayout layout(s);
    // GPT-2's init std: the float32 round-off of the gradients (the floor of this comparison) grows
    // with the sharpness of the activations; at 0.02 it is ~2-3e-7 here, at 0.2 already ~1e-6.
    const auto params = random_params(layout, 0.02, 12);
    const auto inputs = random_tokens(4 * s.T, s.V, 3);
    const auto targets = random_tokens(4 * s.T, s.V, 4);
    const float scale = float(1.0 / double(4 * s.T));  // the mean over the global batch of 4
    const Result one_of_four = run_model(s, Recompute::None, 4, 1, params, inputs, targets, scale);
    const Result four_of_one = run_model(s, Recompute::None, 1, 4, params, inputs, targets, scale);
    const double loss_err = std::abs(four_of_one.loss_sum - one_of_four.loss_sum) / std::abs(one_of_four.loss_sum);
    EXPECT_LE(loss_err, 1e-6);
    double worst = 0;
    for (const auto& t : layout.tensors()) {
      ASSERT_GT(tensor_l2(t, one_of_four.grads), 0.0) << t.name;
      const double err = tensor_relative_l2(t, four_of_one.grads, one_of_four.grads);
      EXPECT_LE(err, 1e-6) << "gradient of " << t.name;
      worst = std::max(worst, err);
    }
    std::printf("[invariants] %s: 4x1 vs 1x4: loss rel err %.2e, max gradient rel err %.2e\n",
                tied ? "tied" : "untied", loss_err, worst);
  }
}

TEST(TrainingInvariants, TwoIdenticalRunsGiveBitIdenticalParameters) {
  const std::string dir = test::make_temp_dir("trident-invariants");
  std::string text;
  std::mt19937 gen(5);
  for (int i = 0; i < 5000; ++i) text += char(' ' + gen() % 90);
  test::write_file(dir + "/data.txt", text);
  const std::string deck = fmt::format(
      "[model]\nvocab_size = 256\nseq_len = 16\nlayers = 2\nhidden = 32\nheads = 4\nseed = 3\ninit_std = 0.05\n"
      "[train]\nsteps = 3\nmicro_batch = 2\nglobal_batch = 4\nlr = 1e-3\nwarmup_steps = 1\ngrad_clip = 0.5\n"
      "recompute = \"selective\"\n"
      "[data]\nformat = \"text\"\npath = \"{}/data.txt\"\n[runtime]\npeak_tflops = 1.0\n",
      dir);
  const Config cfg = parse_deck(deck, "invariants.toml");
  auto k = make_kokkos_kernels();
  Trainer a(cfg, *k), b(cfg, *k);
  for (int64_t step = 1; step <= 3; ++step) {
    const StepMetrics ma = a.train_step(step), mb = b.train_step(step);
    EXPECT_EQ(ma.loss, mb.loss) << "step " << step;
    EXPECT_EQ(ma.grad_norm, mb.grad_norm) << "step " << step;
  }
  const int64_t n = a.model().layout().total();
  auto host = [&](float* p) {
    std::vector<float> h(n);
    k->fence();
    k->copy_to_host(h.data(), p, n);
    return h;
  };
  EXPECT_EQ(host(a.model().params()), host(b.model().params()));
  EXPECT_EQ(host(a.optimizer().exp_avg()), host(b.optimizer().exp_avg()));
  EXPECT_EQ(host(a.optimizer().exp_avg_sq()), host(b.optimizer().exp_avg_sq()));
  // ... and the run did move the parameters (the comparison is not of two untouched copies).
  std::vector<float> init(n);
  init_parameters(a.model().layout(), cfg.model.init_std, cfg.model.seed, init.data());
  EXPECT_NE(host(a.model().params()), init);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace trident
