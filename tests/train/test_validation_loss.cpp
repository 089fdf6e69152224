// Trainer::validation_loss against a separate forward-only computation: the mean per-position
// cross-entropy of the model's current weights over the first val_steps global batches of the
// validation file, or over all of it (val_steps = "all"), read here byte by byte (sequential windows of
// seq_len + 1 tokens, window w = v * global_batch + j starting at token w * seq_len).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <random>

#include "common/test_support.hpp"
#include "deck/deck.hpp"
#include "kernels.hpp"
#include "train/train_run_util.hpp"
#include "train/trainer.hpp"

namespace trident::test {
namespace {

constexpr int64_t kSeqLen = 16, kGlobalBatch = 4, kValSteps = 3;

std::string random_bytes_file(std::vector<uint8_t>& bytes) {
  std::mt19937 gen(3);
  bytes.resize(4096);
  for (auto& b : bytes) b = uint8_t(gen() % 256);
  const std::string path = make_temp_dir("trident-val") + "/val.bin";
  write_file(path, std::string(bytes.begin(), bytes.end()));
  return path;
}

// The loss of the weights `params` (a whole-model buffer) on the validation windows.
double forward_only_loss(const Config& cfg, Kernels& kernels, const float* params, const std::vector<uint8_t>& bytes,
                         int64_t windows = kValSteps * kGlobalBatch) {
  GptModel model(GptShapes::from(cfg.model), kernels, Recompute::None, /*B=*/1);
  std::copy(params, params + model.layout().total(), model.params());  // host memory: the CPU backend
  double sum = 0;
  std::vector<int32_t> inputs(kSeqLen), targets(kSeqLen);
  for (int64_t w = 0; w < windows; ++w) {
    for (int64_t t = 0; t < kSeqLen; ++t) {
      inputs[size_t(t)] = bytes[size_t(w * kSeqLen + t)];
      targets[size_t(t)] = bytes[size_t(w * kSeqLen + t + 1)];
    }
    sum += model.forward_loss(inputs.data(), targets.data());
  }
  return sum / double(windows * kSeqLen);
}

TEST(ValidationLoss, EqualsAForwardOnlyComputationOfTheCurrentWeights) {
  std::vector<uint8_t> bytes;
  const std::string val_path = random_bytes_file(bytes);
  const Config cfg = parse_deck(kTinyTextDeck, "test.toml",
                                {"data.val_path=" + val_path, fmt::format("data.val_steps={}", kValSteps)});
  ASSERT_EQ(cfg.train.global_batch, kGlobalBatch);
  ASSERT_EQ(cfg.model.seq_len, kSeqLen);
  auto kernels = make_kokkos_kernels();
  Trainer trainer(cfg, *kernels);
  const double before = forward_only_loss(cfg, *kernels, trainer.model().params(), bytes);
  EXPECT_NEAR(trainer.validation_loss(), before, 1e-6 * before);
  for (int64_t s = 1; s <= 3; ++s) trainer.train_step(s);
  const double after = forward_only_loss(cfg, *kernels, trainer.model().params(), bytes);
  EXPECT_NEAR(trainer.validation_loss(), after, 1e-6 * after);
  EXPECT_GT(std::abs(after - before), 1e-4) << "training did not change the validation loss";
  // Validation changes nothing: the next step is the one an unvalidated run takes.
  Trainer twin(cfg, *kernels);
  for (int64_t s = 1; s <= 3; ++s) twin.train_step(s);
  EXPECT_EQ(trainer.train_step(4).loss, twin.train_step(4).loss);
}

// "all": the 4096-byte file holds floor(4095 / 16) = 255 whole windows, each scored once: 64 batches of
// 4, the last with one sample of padding (window 255, wrapped to the file's start) that must not count
// (with it the mean would be over 256 windows, off by about 1/256 of the difference of its loss from
// the mean). The 15 bytes past the last window are not scored.
TEST(ValidationLoss, AllCoversEveryWholeWindowOnce) {
  std::vector<uint8_t> bytes;
  const std::string val_path = random_bytes_file(bytes);
  const Config cfg = parse_deck(kTinyTextDeck, "test.toml", {"data.val_path=" + val_path, "data.val_steps=all"});
  auto kernels = make_kokkos_kernels();
  Trainer trainer(cfg, *kernels);
  const EvalTotals totals = trainer.evaluate(kValStepsAll);
  EXPECT_EQ(totals.windows, 255);
  EXPECT_EQ(totals.positions, 255 * kSeqLen);
  const double expected = forward_only_loss(cfg, *kernels, trainer.model().params(), bytes, 255);
  EXPECT_NEAR(totals.mean_loss(), expected, 1e-6 * expected);
  EXPECT_NEAR(trainer.validation_loss(), expected, 1e-6 * expected);
}

}  // namespace
}  // namespace trident::test
