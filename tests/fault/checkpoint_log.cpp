// What `train` and `eval` say about checkpoints: one line per write (size, time, GB/s and its
// phases), progress lines while a long write runs, and each warning once: a stray file in the
// directory once per run (it was repeated at every write), a `latest` naming a missing file once per
// job (it was repeated by every rank).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <sstream>
#include <string>

#include "common/test_support.hpp"
#include "fault/run_job.hpp"

namespace trident::test {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

std::string train(int np, const std::string& dir, const std::string& sets, int* rc) {
  std::string out;
  *rc = run_command(without_parent_mpi_env() + " OPENBLAS_NUM_THREADS=1 timeout -k 5 240 " + local_mpiexec() + " -n " +
                        std::to_string(np) + " " + trident_binary() + " train " + dir + "/deck.toml " + sets,
                    &out);
  return out;
}

TEST(CheckpointLog, OneLinePerWriteAndAStrayFileSaidOnce) {
  const std::string dir = make_temp_dir("trident-ckpt-log");
  write_file(dir + "/deck.toml", small_deck(1, 1, 2));
  int rc = 0;
  std::string out = train(2, dir, "--set train.steps=1 --set checkpoint.dir=" + dir + "/first", &rc);
  ASSERT_EQ(rc, 0) << out;
  // A copy of step 1 under another step's name: never deleted by keep, and said so once.
  fs::create_directories(dir + "/ckpt");
  fs::copy_file(dir + "/first/step_00000001.h5", dir + "/ckpt/step_00000050.h5");
  out = train(2, dir,
              "--set train.steps=3 --set checkpoint.dir=" + dir + "/ckpt --set checkpoint.every_steps=1 "
              "--set checkpoint.keep=1 --set checkpoint.resume=never",
              &rc);
  ASSERT_EQ(rc, 0) << out;
  const std::regex line(R"(checkpoint: step (\d) \([a-z0-9 ]+\) -> \S+/step_0000000\d\.h5: [0-9.]+ MB in [0-9.]+ s, )"
                        R"([0-9.e+-]+ GB/s \(device-to-host copy [0-9.]+ s, pack\+checksum [0-9.]+ s, HDF5 writes )"
                        R"([0-9.]+ s \((collective|independent)\), flush\+fsync\+rename\+latest [0-9.]+ s\))");
  std::istringstream in(out);
  int writes = 0;
  for (std::string l; std::getline(in, l);) {
    if (l.find("checkpoint: step_") != std::string::npos || l.find("checkpoint: wrote") != std::string::npos)
      ADD_FAILURE() << "a second line for a write: " << l;
    if (l.find(" -> ") != std::string::npos && l.find("checkpoint: step ") != std::string::npos) {
      EXPECT_TRUE(std::regex_search(l, line)) << l;
      ++writes;
    }
  }
  EXPECT_EQ(writes, 3) << out;
  EXPECT_EQ(count(out, "never deleted by keep"), 1) << out;
  EXPECT_TRUE(fs::exists(dir + "/ckpt/step_00000050.h5"));
}

// A write that takes long (here stalled before its rename) is reported every 10 s while it runs.
TEST(CheckpointLog, ALongWriteReportsItsProgress) {
  const std::string dir = make_temp_dir("trident-ckpt-log");
  write_file(dir + "/deck.toml", small_deck(1, 1, 1));
  BackgroundJob job("export TRIDENT_INJECT_FAULT=checkpoint-stall:before_rename; " + without_parent_mpi_env() +
                        " OPENBLAS_NUM_THREADS=1 " + trident_binary() + " train " + dir +
                        "/deck.toml --set train.steps=1 --set runtime.checkpoint_timeout_s=0 --set checkpoint.dir=" +
                        dir + "/ckpt",
                    dir + "/out.txt");
  const std::string expected = "checkpoint: step 1: still writing " + dir + "/ckpt/step_00000001.h5 after 10 s: ";
  ASSERT_TRUE(wait_until([&] { return job.output().find(expected) != std::string::npos || job.wait_for(0); }, 60))
      << job.output();
  EXPECT_FALSE(job.wait_for(0)) << job.output();
  EXPECT_THAT(job.output(), ::testing::ContainsRegex(R"(after 10 s: 0\.[0-9]{3} GB on disk so far)"));
}

// Every rank of `eval` resolves the checkpoint directory alike; what is wrong with it is said once.
TEST(CheckpointLog, EvalSaysOnceThatLatestNamesAMissingFile) {
  const std::string dir = make_temp_dir("trident-ckpt-log");
  write_file(dir + "/deck.toml", small_deck(1, 1, 2));
  int rc = 0;
  std::string out = train(2, dir, "--set train.steps=1 --set checkpoint.dir=" + dir + "/ckpt", &rc);
  ASSERT_EQ(rc, 0) << out;
  write_file(dir + "/ckpt/latest", "step_00000009.h5\n");
  ASSERT_EQ(run_command(without_parent_mpi_env() + " OPENBLAS_NUM_THREADS=1 timeout -k 5 120 " + local_mpiexec() +
                            " -n 2 " + trident_binary() + " eval " + dir + "/deck.toml --checkpoint " + dir +
                            "/ckpt --data /usr/share/common-licenses/GPL-3",
                        &out),
            0)
      << out;
  EXPECT_EQ(count(out, "/ckpt/step_00000009.h5, which does not exist"), 1) << out;
}

}  // namespace
}  // namespace trident::test
