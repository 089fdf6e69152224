// Invariants of the model and the training loop that need no reference implementation:
//   * recompute none / full / selective give bit-identical losses and gradients (the kernels are
//     deterministic and recompute reruns the very same ops on the very same inputs);
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
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
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
Result run_model(const GptShapes& s, Recompute recompute, int64_t B, int64_t micro_batches,
                 const std::vector<float>& params, const std::vector<int32_t>& inputs,
                 const std::vector<int32_t>& targets, float dloss_scale) {
  auto k = make_kokkos_kernels();
  GptModel model(s, *k, recompute, B);
  k->copy_to_device(model.params(), params.data(), int64_t(params.size()));
  k->fill(model.grads(), 0.f, model.layout().total());
  Result r;
  for (int64_t mb = 0; mb < micro_batches; ++mb)
    r.loss_sum += model.forward_backward(inputs.data() + mb * B * s.T, targets.data() + mb * B * s.T, dloss_scale);
  k->fence();
  r.grads.resize(model.layout().total());
  k->copy_to_host(r.grads.data(), model.grads(), model.layout().total());
  return r;
}

TEST(TrainingInvariants, RecomputeModesGiveBitIdenticalLossesAndGradients) {
  for (const bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    const GptShapes s = GptShapes::from(small_model(tied));
    const ParameterLayout layout(s);
    const auto params = random_params(layout, 0.1, 11);
    const int64_t B = 2, micro_batches = 2;  // two calls: full recompute reuses its buffers across them
    const auto inputs = random_tokens(micro_batches * B * s.T, s.V, 1);
    const auto targets = random_tokens(micro_batches * B * s.T, s.V, 2);
    const float scale = float(1.0 / double(micro_batches * B * s.T));
    const Result none = run_model(s, Recompute::None, B, micro_batches, params, inputs, targets, scale);
    for (const Recompute mode : {Recompute::Full, Recompute::Selective}) {
      SCOPED_TRACE(to_string(mode));
      const Result r = run_model(s, mode, B, micro_batches, params, inputs, targets, scale);
      EXPECT_EQ(r.loss_sum, none.loss_sum);
      ASSERT_EQ(r.grads.size(), none.grads.size());
      for (const auto& t : layout.tensors())
        EXPECT_EQ(std::memcmp(r.grads.data() + t.offset, none.grads.data() + t.offset, sizeof(float) * t.numel), 0)
            << "gradient of " << t.name << " differs from recompute none";
    }
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
      double d2 = 0, r2 = 0;
      for (int64_t i = t.offset; i < t.offset + t.numel; ++i) {
        const double d = double(four_of_one.grads[i]) - double(one_of_four.grads[i]);
        d2 += d * d;
        r2 += double(one_of_four.grads[i]) * double(one_of_four.grads[i]);
      }
      ASSERT_GT(r2, 0.0) << t.name;
      const double err = std::sqrt(d2 / r2);
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
