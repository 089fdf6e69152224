// Outputs a run writes, on a full file system (issue #28, defects 3 and 4), at 1 and 2 ranks. Each
// case mounts a small tmpfs in a private mount namespace (`unshare -m`; as a user, inside a user
// namespace) for the output, with the checkpoints elsewhere:
// - metrics: the run stops after the step whose record did not fit, with a checkpoint of that very
//   step (no step lost beyond the one in progress), exit 75 (requeued by jobs/train.sbatch: a full
//   file system may have room later), a message with the path and errno, and only whole JSON lines in
//   the file; without checkpoint.dir exit 74 (nothing to save, not requeued);
// - trace: exit 74 with the path and errno, and neither a trace nor its temporary file left behind
//   (before the fix: exit 0, "timeline written", an empty file).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "common/test_support.hpp"
#include "fault/run_job.hpp"

namespace fs = std::filesystem;

namespace trident::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string read_all(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

class OutputOnFullFileSystem : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir("trident-fault-output");
    mnt_ = dir_ + "/mnt";
    fs::create_directories(mnt_);
    write_file(dir_ + "/deck.toml", small_deck(1, 1, GetParam()));
  }

  // Mounts a tmpfs of `bytes` on mnt_, runs `trident train` with `args` there, and returns its exit
  // status; the run's output goes to dir_/out.txt, and `after` (shell) runs before the unmount.
  int train_on_small_tmpfs(int64_t bytes, const std::string& args, const std::string& after = "") {
    const std::string train = fmt::format(
        "{} OPENBLAS_NUM_THREADS=1 timeout -k 5 120 {} -n {} {} train {}/deck.toml {}", without_parent_mpi_env(),
        local_mpiexec(), GetParam(), trident_binary(), dir_, args);
    write_file(dir_ + "/run.sh", fmt::format("set -u\n"
                                             "mount -t tmpfs -o size={} tmpfs {} || {{ echo 'MOUNT FAILED'; exit 97; }}\n"
                                             "{} > {}/out.txt 2>&1; rc=$?\n"
                                             "{}\n"
                                             "echo \"RUN rc=$rc\"\n",
                                             bytes, mnt_, train, dir_, after));
    std::string out;
    const std::string unshare = geteuid() == 0 ? "unshare -m" : "unshare -r -m";
    const int rc = run_command(fmt::format("{} --propagation private sh {}/run.sh", unshare, dir_), &out);
    EXPECT_THAT(out, Not(HasSubstr("MOUNT FAILED")))
        << "cannot mount a tmpfs in a private mount namespace (root, or user namespaces, are needed):\n" << out;
    EXPECT_EQ(rc, 0) << out;
    const size_t at = out.find("RUN rc=");
    return at == std::string::npos ? -1 : std::stoi(out.substr(at + 7));
  }

  std::string log() const { return read_all(dir_ + "/out.txt"); }

  std::string dir_, mnt_;
};

TEST_P(OutputOnFullFileSystem, MetricsStopTheRunWithACheckpointOfTheFailedStep) {
  const std::string metrics = mnt_ + "/m.jsonl";
  const int rc = train_on_small_tmpfs(
      16384,
      fmt::format("--set mesh.dp={} --set train.steps=1000 --set runtime.metrics={} --set checkpoint.dir={}/ckpt "
                  "--set checkpoint.every_steps=500",
                  GetParam(), metrics, dir_),
      fmt::format("cp {} {}/metrics.jsonl", metrics, dir_));
  const std::string out = log();
  EXPECT_EQ(rc, 75) << out;
  EXPECT_THAT(out, HasSubstr(fmt::format("[runtime] metrics: cannot write {}: No space left on device (errno {})",
                                         metrics, ENOSPC)));
  // Only whole records; the last one is the step before the one that did not fit.
  std::ifstream lines(dir_ + "/metrics.jsonl");
  std::string line;
  int64_t last_step = 0;
  while (std::getline(lines, line)) {
    nlohmann::json j;
    ASSERT_NO_THROW(j = nlohmann::json::parse(line)) << "a partial record: " << line;
    last_step = j.at("step").get<int64_t>();
  }
  ASSERT_GT(last_step, 2) << out;
  const int64_t failed = last_step + 1;
  EXPECT_THAT(out, HasSubstr(fmt::format("an output could not be written after step {}: a checkpoint follows step {}",
                                         failed, failed)));
  // Steps lost: none beyond the one whose record failed, which the checkpoint holds.
  EXPECT_TRUE(fs::exists(fmt::format("{}/ckpt/step_{:08d}.h5", dir_, failed))) << out;
  EXPECT_EQ(read_all(dir_ + "/ckpt/latest"), fmt::format("step_{:08d}.h5\n", failed));
  EXPECT_THAT(out, Not(HasSubstr("internal error")));
  RecordProperty("steps_lost", 0);
  RecordProperty("failed_step", int(failed));
}

TEST_P(OutputOnFullFileSystem, MetricsWithoutCheckpointDirExit74) {
  const int rc = train_on_small_tmpfs(
      16384, fmt::format("--set mesh.dp={} --set train.steps=1000 --set runtime.metrics={}/m.jsonl", GetParam(), mnt_));
  const std::string out = log();
  EXPECT_EQ(rc, 74) << out;
  EXPECT_THAT(out, HasSubstr("no checkpoint.dir to save to, then the run stops (exit status 74"));
}

TEST_P(OutputOnFullFileSystem, TraceFailsWithItsErrnoAndLeavesNoFile) {
  const std::string trace = mnt_ + "/trace.json";
  const int rc = train_on_small_tmpfs(
      4096,
      fmt::format("--set mesh.dp={} --set train.steps=40 --set runtime.trace={} --set checkpoint.dir={}/ckpt",
                  GetParam(), trace, dir_),
      fmt::format("ls -a {} > {}/mnt_listing.txt", mnt_, dir_));
  const std::string out = log();
  EXPECT_EQ(rc, 74) << out;
  EXPECT_THAT(out, HasSubstr(fmt::format("[runtime] trace: cannot write {}: No space left on device (errno {})", trace,
                                         ENOSPC)));
  EXPECT_THAT(out, Not(HasSubstr("timeline written")));
  const std::string listing = read_all(dir_ + "/mnt_listing.txt");
  EXPECT_THAT(listing, Not(HasSubstr("trace.json"))) << listing;
  // The training itself was saved.
  EXPECT_TRUE(fs::exists(dir_ + "/ckpt/step_00000040.h5")) << out;
}

INSTANTIATE_TEST_SUITE_P(Ranks, OutputOnFullFileSystem, ::testing::Values(1, 2),
                         [](const auto& info) { return fmt::format("np{}", info.param); });

}  // namespace
}  // namespace trident::test
