// `trident eval` as a user runs it: what it refuses (exit 2, one message) and what it leaves alone (the
// checkpoint directory: no lock, no file). Its figures are checked against the PyTorch reference in
// tests/reference (WholeFileEvaluationMatchesReferenceOnEveryLayout).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "common/test_support.hpp"
#include "train/train_run_util.hpp"

namespace trident::test {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

CommandRun run_eval(const std::string& dir, const std::string& args) {
  return run_trident(dir, 1, "eval deck.toml " + args);
}

std::vector<std::string> files_of(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(EvalCommand, RefusesWhatItCannotEvaluate) {
  const std::string dir = make_temp_dir("trident-eval");
  write_file(dir + "/deck.toml", kTinyTextDeck);
  const CommandRun no_data = run_eval(dir, "");
  EXPECT_EQ(no_data.rc, 2) << no_data.out;
  EXPECT_THAT(no_data.out, HasSubstr("nothing to evaluate on: give --data PATH or set [data] val_path"));
  const CommandRun no_model = run_eval(dir, "--data /usr/share/common-licenses/GPL-2");
  EXPECT_EQ(no_model.rc, 2) << no_model.out;
  EXPECT_THAT(no_model.out, HasSubstr("nothing to evaluate: no --checkpoint, no [checkpoint] dir"));
  fs::create_directory(dir + "/empty");
  const CommandRun empty = run_eval(dir, "--data /usr/share/common-licenses/GPL-2 --checkpoint empty");
  EXPECT_EQ(empty.rc, 2) << empty.out;
  EXPECT_THAT(empty.out, HasSubstr("empty: no checkpoint in this directory"));
  fs::remove_all(dir);
}

// A run's checkpoint directory is read, never written: no lock (a training run may hold it), no file.
TEST(EvalCommand, ReadsTheCheckpointDirectoryWithoutWritingIt) {
  const TrainOutput trained = run_train(1, kTinyTextDeck, {"train.steps=2", "checkpoint.dir=ckpt"});
  ASSERT_EQ(trained.rc, 0) << trained.out;
  const std::string ckpt = trained.dir + "/ckpt";
  const auto before = files_of(ckpt);
  write_file(ckpt + "/trident.lock", "{\"note\": \"a training run holds this directory\"}\n");
  const CommandRun r = run_eval(trained.dir, "--set checkpoint.dir=ckpt --data /usr/share/common-licenses/GPL-2 "
                                          "--json eval.json");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("eval: loss "));
  std::ifstream f(trained.dir + "/eval.json");
  const auto j = nlohmann::json::parse(f);
  EXPECT_THAT(j.at("checkpoint").get<std::string>(), ::testing::EndsWith("ckpt/step_00000002.h5"));
  EXPECT_GT(j.at("windows").get<int64_t>(), 1000);  // GPL-2 (18 KB) in windows of 16 bytes
  fs::remove(ckpt + "/trident.lock");
  EXPECT_EQ(files_of(ckpt), before);
  fs::remove_all(trained.dir);
}

}  // namespace
}  // namespace trident::test
