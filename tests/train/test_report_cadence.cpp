// Which steps `trident train` reports: runtime.log_every (plus the first and last step, and every
// step with a validation loss), and data.val_every (a validation loss at every multiple of it, in
// the log line and the metrics, and nowhere else).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <regex>
#include <set>

#include "train/train_run_util.hpp"

namespace trident::test {
namespace {

// Step numbers of the "step s/N | ..." log lines.
std::vector<int64_t> logged_steps(const std::string& out, int64_t total) {
  const std::regex re(fmt::format(R"(step +(\d+)/{} \|)", total));
  std::vector<int64_t> steps;
  for (const auto& line : lines_with(out, fmt::format("/{} | loss", total))) {
    std::smatch m;
    if (std::regex_search(line, m, re)) steps.push_back(std::stoll(m[1]));
  }
  return steps;
}

TEST(ReportCadence, LogEveryPrintsMultiplesPlusFirstAndLastStep) {
  const TrainOutput run = run_train(1, kTinyTextDeck, {"train.steps=7", "runtime.log_every=3"});
  ASSERT_EQ(run.rc, 0) << run.out;
  EXPECT_EQ(logged_steps(run.out, 7), (std::vector<int64_t>{1, 3, 6, 7})) << run.out;
  EXPECT_EQ(run.steps.size(), 7u) << "the metrics file has every step";
}

TEST(ReportCadence, ValidationRunsAtMultiplesOfValEvery) {
  const TrainOutput run = run_train(1, kTinyTextDeck,
                                    {"train.steps=5", "runtime.log_every=100", "data.val_every=2", "data.val_steps=3",
                                     "data.val_path=/usr/share/common-licenses/GPL-2"});
  ASSERT_EQ(run.rc, 0) << run.out;
  ASSERT_EQ(run.steps.size(), 5u) << run.out;
  std::set<int64_t> with_val;
  for (const auto& s : run.steps)
    if (s.contains("val_loss")) with_val.insert(s.at("step").get<int64_t>());
  EXPECT_EQ(with_val, (std::set<int64_t>{2, 4})) << run.out;
  // Logged: the first and last step and the validation steps; the latter with the metrics' value.
  EXPECT_EQ(logged_steps(run.out, 5), (std::vector<int64_t>{1, 2, 4, 5})) << run.out;
  for (int64_t step : {2, 4}) {
    const double val = run.steps[size_t(step - 1)].at("val_loss").get<double>();
    EXPECT_GT(val, 0.0);
    EXPECT_EQ(lines_with(run.out, fmt::format("step {}/5 |", step)).size(), 1u);
    EXPECT_NE(run.out.find(fmt::format("| val {:.4f}", val)), std::string::npos) << "step " << step << "\n" << run.out;
  }
  // The model changed between the two validations, so did its validation loss.
  EXPECT_NE(run.steps[1].at("val_loss").get<double>(), run.steps[3].at("val_loss").get<double>());
}

}  // namespace
}  // namespace trident::test
