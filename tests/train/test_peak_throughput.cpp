// The throughput reference for MFU (train/peak_throughput.hpp): the CPU's sgemm peak is measured
// once per machine kind and BLAS set-up and cached, so identical runs report the same MFU (it moved
// from 49% to 87% between two runs when it was measured briefly at every start); the log says which
// figure was used and where it came from; a damaged cache file is ignored with a warning.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <iterator>
#include <optional>
#include <regex>

#include "common/test_support.hpp"
#include "core/blas_runtime.hpp"
#include "core/output_file.hpp"
#include "train/peak_throughput.hpp"
#include "train/train_run_util.hpp"

namespace trident::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Sets an environment variable for the life of the object (children started meanwhile inherit it).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(PeakCache, KeyNamesTheCpuTheBlasKernelsAndTheThreads) {
  const std::string key = cpu_peak_cache_key();
  EXPECT_THAT(key, HasSubstr(" | " + blas_core_name() + " kernels | "));
  EXPECT_THAT(key, ::testing::AnyOf(::testing::EndsWith(" BLAS thread"), ::testing::EndsWith(" BLAS threads")));
  std::string cpuinfo;
  run_command("grep -m1 'model name' /proc/cpuinfo | sed 's/^[^:]*: *//'", &cpuinfo);
  if (!cpuinfo.empty()) {
    EXPECT_EQ(key.substr(0, cpuinfo.size() - 1), cpuinfo.substr(0, cpuinfo.size() - 1));
  }
}

TEST(PeakCache, LivesUnderXdgCacheHomeOrHome) {
  const std::string dir = make_temp_dir("trident-peak");
  {
    const ScopedEnv xdg("XDG_CACHE_HOME", dir + "/xdg");
    EXPECT_THAT(cpu_peak_cache_path("a"), ::testing::MatchesRegex(dir + "/xdg/trident/cpu-peak-[0-9a-f]{16}\\.toml"));
    EXPECT_NE(cpu_peak_cache_path("a"), cpu_peak_cache_path("b"));
  }
  const ScopedEnv home("HOME", dir + "/home");
  const ScopedEnv relative("XDG_CACHE_HOME", "relative/dir");  // ignored, as the XDG spec says
  EXPECT_THAT(cpu_peak_cache_path("a"), ::testing::StartsWith(dir + "/home/.cache/trident/cpu-peak-"));
}

TEST(PeakCache, RoundTripAndDamagedFilesAreIgnoredWithAReason) {
  const std::string dir = make_temp_dir("trident-peak");
  const std::string path = dir + "/sub/dir/cpu-peak.toml";
  std::string problem;
  EXPECT_FALSE(read_cpu_peak(path, "k", &problem));
  EXPECT_EQ(problem, "") << "a missing file is no problem";
  write_cpu_peak(path, "k", 0.125);  // creates the directories
  EXPECT_EQ(read_cpu_peak(path, "k", &problem), 0.125) << problem;
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir + "/sub/dir"), std::filesystem::directory_iterator()), 1) << "only the file itself";
  EXPECT_FALSE(read_cpu_peak(path, "another machine", &problem));
  EXPECT_THAT(problem, HasSubstr("it is for \"k\", not \"another machine\""));
  const std::vector<std::pair<std::string, std::string>> damaged = {
      {"tflops = [oops", "line 1"},
      {"", "not a \"trident cpu peak v1\" file"},
      {"format = \"trident cpu peak v1\"\nkey = \"k\"\ntflops = -1.0\n", "no positive tflops figure"},
      {"format = \"trident cpu peak v1\"\nkey = \"k\"\ntflops = nan\n", "no positive tflops figure"},
  };
  for (const auto& [text, reason] : damaged) {
    write_file(path, text);
    problem.clear();
    EXPECT_FALSE(read_cpu_peak(path, "k", &problem)) << text;
    EXPECT_THAT(problem, HasSubstr(reason)) << text;
  }
  std::filesystem::remove(path);
  std::filesystem::create_directory(path);  // a directory where the file belongs
  problem.clear();
  EXPECT_FALSE(read_cpu_peak(path, "k", &problem));
  EXPECT_THAT(problem, HasSubstr("directory"));
  write_file(dir + "/file", "");
  EXPECT_THROW(write_cpu_peak(dir + "/file/cpu-peak.toml", "k", 1.0), OutputError);
}

// The "throughput reference" line: the figure and its source.
std::pair<double, std::string> reference_line(const std::string& out) {
  const std::regex re(R"(throughput reference for MFU: ([0-9.]+) TFLOP/s per rank \((.*)\))");
  std::smatch m;
  if (!std::regex_search(out, m, re)) return {-1, ""};
  return {std::stod(m[1]), m[2]};
}

// End to end: measured and cached by the first run, read by the next ones (at 1 and 2 ranks) with the
// same figure; a damaged cache is said, measured again and rewritten; runtime.peak_tflops wins.
TEST(PeakThroughput, MeasuredOnceThenCachedAndAlwaysNamed) {
  const std::string dir = make_temp_dir("trident-peak");
  const ScopedEnv xdg("XDG_CACHE_HOME", dir + "/cache");
  const std::vector<std::string> one_step = {"train.steps=1"};
  const TrainOutput first = run_train(1, kTinyTextDeck, one_step);
  ASSERT_EQ(first.rc, 0) << first.out;
  const auto [measured, how] = reference_line(first.out);
  ASSERT_GT(measured, 0) << first.out;
  EXPECT_THAT(how, HasSubstr("measured now, best of 10 sgemm runs"));
  EXPECT_THAT(how, HasSubstr("cached in " + dir + "/cache/trident/cpu-peak-"));
  for (int np : {1, 2}) {
    const TrainOutput again = run_train(np, kTinyTextDeck, {"train.steps=1", "mesh.dp=" + std::to_string(np)});
    ASSERT_EQ(again.rc, 0) << again.out;
    const auto [cached, source] = reference_line(again.out);
    EXPECT_EQ(cached, measured) << again.out;
    EXPECT_THAT(source, HasSubstr("cached in " + dir + "/cache/trident/cpu-peak-")) << again.out;
    EXPECT_THAT(source, HasSubstr(" kernels | 1 BLAS thread; delete the file to measure again")) << again.out;
  }
  const auto files = std::filesystem::directory_iterator(dir + "/cache/trident");
  const std::string cache = std::filesystem::begin(files)->path().string();
  write_file(cache, "tflops = \"garbage");
  const TrainOutput damaged = run_train(1, kTinyTextDeck, one_step);
  ASSERT_EQ(damaged.rc, 0) << damaged.out;
  EXPECT_THAT(damaged.out, HasSubstr("ignoring the cached CPU peak " + cache + ": ")) << damaged.out;
  EXPECT_THAT(reference_line(damaged.out).second, HasSubstr("measured now")) << damaged.out;
  std::smatch key;  // trident's own key (its BLAS kernels may differ from this process's)
  ASSERT_TRUE(std::regex_search(how, key, std::regex(R"(runs \((.*)\); cached in)"))) << how;
  std::string problem;
  EXPECT_TRUE(read_cpu_peak(cache, key[1], &problem)) << "rewritten: " << problem;
  const TrainOutput set = run_train(1, kTinyTextDeck, {"train.steps=1", "runtime.peak_tflops=2"});
  ASSERT_EQ(set.rc, 0) << set.out;
  EXPECT_EQ(reference_line(set.out), std::make_pair(2.0, std::string("runtime.peak_tflops"))) << set.out;
}

// A reference below what the run computes (MFU above 100%) is wrong, and the run says so once, naming the
// reference's source and the way to replace it; a run below its reference says nothing.
TEST(PeakThroughput, ARunFasterThanItsReferenceSaysSoOnce) {
  EXPECT_EQ(mfu_above_peak_warning(0.5, {1.0, "runtime.peak_tflops"}), "");
  EXPECT_EQ(mfu_above_peak_warning(1.0, {1.0, "runtime.peak_tflops"}), "");
  const std::string cached = mfu_above_peak_warning(0.071, {0.042, "cached in /c/cpu-peak-1.toml for X"});
  EXPECT_THAT(cached, HasSubstr("MFU 169%: this run computes 0.071 TFLOP/s per rank, more than its throughput "
                                "reference of 0.042 (cached in /c/cpu-peak-1.toml for X)"));
  EXPECT_THAT(cached, HasSubstr("set runtime.peak_tflops, or delete the cache file to measure again"));

  const std::string warning = "this run's MFU figures overstate";
  const TrainOutput low = run_train(1, kTinyTextDeck, {"train.steps=3", "runtime.peak_tflops=1e-6"});
  ASSERT_EQ(low.rc, 0) << low.out;
  EXPECT_THAT(low.out, HasSubstr("more than its throughput reference of 0.000 (runtime.peak_tflops)")) << low.out;
  size_t said = 0;
  for (size_t at = low.out.find(warning); at != std::string::npos; at = low.out.find(warning, at + 1)) ++said;
  EXPECT_EQ(said, 1u) << low.out;
  const TrainOutput high = run_train(1, kTinyTextDeck, {"train.steps=3", "runtime.peak_tflops=1000"});
  ASSERT_EQ(high.rc, 0) << high.out;
  EXPECT_THAT(high.out, Not(HasSubstr(warning))) << high.out;
}

}  // namespace
}  // namespace trident::test
