// Where a run is in its data and what it did (train/run_summary.hpp): a line when an epoch of the
// training data ends (the data wraps around without a word otherwise), and one summary line at the
// end: steps, wall time, tokens/s, final training and validation loss, epochs, the checkpoint written.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <regex>

#include "common/test_support.hpp"
#include "data/dataset.hpp"
#include "train/run_summary.hpp"
#include "train/train_run_util.hpp"

namespace trident::test {
namespace {

using ::testing::HasSubstr;

// 200 bytes: 12 whole windows of 16 (+1) tokens.
std::string small_text(const std::string& dir) {
  std::string text;
  for (int i = 0; text.size() < 200; ++i) text += fmt::format("line {} of a small file\n", i);
  text.resize(200);
  write_file(dir + "/small.txt", text);
  return dir + "/small.txt";
}

TEST(Epochs, CountedByTheSamplersMapping) {
  const std::string dir = make_temp_dir("trident-epochs");
  const auto stream = open_token_stream(DataFormat::Text, small_text(dir), 256);
  ASSERT_EQ(stream->size(), 200);
  // Shuffle: 4 windows per step out of 12: epochs end in steps 3, 6, 9.
  const BatchSampler shuffled(*stream, DataOrder::Shuffle, 1, 16, 4);
  EXPECT_EQ(epochs_completed(shuffled, 200, 2), 0);
  EXPECT_EQ(epochs_completed(shuffled, 200, 3), 1);
  EXPECT_EQ(epochs_completed(shuffled, 200, 7), 2);
  EXPECT_NEAR(epochs_read(shuffled, 200, 7), 28.0 / 12, 1e-12);
  EXPECT_EQ(epoch_end_line(shuffled, 200, 2), "");
  EXPECT_EQ(epoch_end_line(shuffled, 200, 3),
            "data: epoch 1 of the training data ended in step 3 (12 windows per epoch); the data wraps around: the "
            "next epoch reads it again in a new order");
  // Sequential: 64 tokens per step out of 200: epochs end in steps 4 and 7; the first sample of step
  // 4 (0-based 3) starts past the end, at token 192, and wraps to token 0.
  const BatchSampler sequential(*stream, DataOrder::Sequential, 1, 16, 4);
  EXPECT_EQ(epochs_completed(sequential, 200, 3), 0);
  EXPECT_EQ(epochs_completed(sequential, 200, 4), 1);
  EXPECT_EQ(epochs_completed(sequential, 200, 7), 2);
  EXPECT_EQ(sequential.window_start(3, 1), (3 * 4 + 1) * 16 % 200);  // the mapping the count follows
  EXPECT_EQ(epoch_end_line(sequential, 200, 4),
            "data: epoch 1 of the training data ended in step 4 (200 tokens per epoch); the data wraps around: "
            "reading it again from the start");
  // A batch larger than the data: several epochs in one step.
  const BatchSampler big(*stream, DataOrder::Shuffle, 1, 16, 30);
  EXPECT_THAT(epoch_end_line(big, 200, 2), HasSubstr("data: epochs 3-5 of the training data ended in step 2"));
}

TEST(RunSummary, SaysWhatIsMissingAsWellAsWhatIsThere) {
  RunSummary s;
  s.first_step = 3;
  s.last_step = 7;
  s.planned_steps = 10;
  s.wall_s = 2;
  s.tokens = 320;
  s.final_loss = 4.25;
  s.epochs = 1.5;
  EXPECT_EQ(format_run_summary(s),
            "run summary: 5 step(s) (3-7 of 10) in 2.000 s wall, 160 tokens/s | final training loss 4.2500 | no "
            "validation data | 1.50 epoch(s) of the training data | no checkpoint (no checkpoint.dir)");
  s.has_val_data = true;
  s.checkpoints_on = true;
  EXPECT_THAT(format_run_summary(s), HasSubstr("| no validation loss measured (data.val_every) |"));
  EXPECT_THAT(format_run_summary(s), HasSubstr("| no checkpoint written by this run"));
  s.val_loss = 4.5;
  s.val_step = 6;
  s.checkpoint = "/c/step_00000007.h5";
  s.checkpoint_step = 7;
  EXPECT_THAT(format_run_summary(s), HasSubstr("| final validation loss 4.5000 (step 6) |"));
  EXPECT_THAT(format_run_summary(s), ::testing::EndsWith("| checkpoint /c/step_00000007.h5 (step 7)"));
}

// End to end at 2 ranks: the epoch lines, and the summary's figures against the metrics.
TEST(RunSummary, TrainSaysWhenTheDataWrapsAndSumsUpAtTheEnd) {
  const std::string dir = make_temp_dir("trident-epochs");
  const std::string data = small_text(dir);
  const TrainOutput run = run_train(2, kTinyTextDeck,
                                    {"mesh.dp=2", "train.steps=7", "data.order=shuffle", "data.path=" + data,
                                     "data.val_path=" + data, "data.val_every=3", "data.val_steps=1",
                                     "checkpoint.dir=" + dir + "/ckpt"});
  ASSERT_EQ(run.rc, 0) << run.out;
  ASSERT_EQ(run.steps.size(), 7u) << run.out;
  EXPECT_EQ(lines_with(run.out, "of the training data ended in step").size(), 2u) << run.out;
  EXPECT_THAT(run.out, HasSubstr("data: epoch 1 of the training data ended in step 3 (12 windows per epoch)"));
  EXPECT_THAT(run.out, HasSubstr("data: epoch 2 of the training data ended in step 6 (12 windows per epoch)"));
  const auto summary = lines_with(run.out, "run summary: ");
  ASSERT_EQ(summary.size(), 1u) << run.out;
  const std::regex re(R"(run summary: 7 step\(s\) \(1-7 of 7\) in ([0-9.]+) s wall, ([0-9]+) tokens/s \| final )"
                      R"(training loss ([0-9.]+) \| final validation loss ([0-9.]+) \(step 6\) \| 2\.33 epoch\(s\) of )"
                      R"(the training data \| checkpoint (\S+) \(step 7\))");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(summary[0], m, re)) << summary[0];
  // The wall time is printed to 1 ms (a run this small takes tens of ms): the tokens/s lie between those
  // of its rounding's two ends.
  const double wall = std::stod(m[1]), tokens = 7 * 64, rate = std::stod(m[2]);
  ASSERT_GT(wall, 0.0005) << summary[0];
  EXPECT_GE(rate, tokens / (wall + 0.0005) - 1) << summary[0];
  EXPECT_LE(rate, tokens / (wall - 0.0005) + 1) << summary[0];
  EXPECT_NEAR(std::stod(m[3]), run.steps.back().at("loss").get<double>(), 5e-5);
  EXPECT_NEAR(std::stod(m[4]), run.steps[5].at("val_loss").get<double>(), 5e-5);
  EXPECT_EQ(m[5], dir + "/ckpt/step_00000007.h5");
}

}  // namespace
}  // namespace trident::test
