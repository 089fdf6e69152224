// A full and a read-only checkpoint file system under `mpiexec -n N trident train` (issue #17, item
// 1), end to end at 2 and 4 ranks. Each case runs in a private mount namespace (`unshare -m`) on a
// tmpfs sized to hold one checkpoint and half of the next: the run resumes from step 2, fails to
// write step 4, and must exit with status 2 and a clear message (no hang, no crash), leave the step
// 2 checkpoint valid and named by `latest`, and leave no partial file; a rerun does the same. Mounting
// needs root, or (`make test` as a user) a user namespace (`unshare -r`, on by default in Debian 12);
// without either the test fails saying so.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <unistd.h>

#include <filesystem>

#include "common/test_support.hpp"

namespace fs = std::filesystem;

namespace trident::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kDeck = R"(
[model]
vocab_size = 256
seq_len = 16
layers = 2
hidden = 32
heads = 4
seed = 11
[train]
steps = 4
micro_batch = 1
global_batch = 8
lr = 1e-3
[data]
format = "text"
path = "/usr/share/common-licenses/GPL-3"
[runtime]
peak_tflops = 1
mpi_wait = "poll"
)";

std::string root_dir() {
  static const std::string r = make_temp_dir("trident-fault-fullfs");
  return r;
}

std::string train_command(int np, const std::string& dir) {
  return fmt::format(
      "{} OPENBLAS_NUM_THREADS=1 timeout -k 5 120 {} -n {} {} train {}/deck.toml --set mesh.dp={} "
      "--set checkpoint.dir={} --set checkpoint.every_steps=2 --set checkpoint.keep=2",
      without_parent_mpi_env(), local_mpiexec(), np, trident_binary(), root_dir(), np, dir);
}

// The checkpoint of step 2 of the deck, written once by a normal run.
std::string step2_checkpoint() {
  static std::string path;
  if (path.empty()) {
    write_file(root_dir() + "/deck.toml", kDeck);
    const std::string dir = root_dir() + "/reference";
    std::string out;
    const int rc = run_command(train_command(1, dir) + " --set train.steps=2", &out);
    EXPECT_EQ(rc, 0) << out;
    path = dir + "/step_00000002.h5";
  }
  return path;
}

class CheckpointFullFileSystem : public ::testing::TestWithParam<int> {};

TEST_P(CheckpointFullFileSystem, FailsCleanlyKeepsThePreviousCheckpointAndRerunsTheSame) {
  const int np = GetParam();
  const std::string ckpt = step2_checkpoint();
  ASSERT_TRUE(fs::exists(ckpt));
  const std::string mnt = root_dir() + fmt::format("/mnt{}", np);
  fs::create_directories(mnt);
  // Room for the step 2 checkpoint and half of another one.
  const auto size = (fs::file_size(ckpt) * 3 / 2 + 4095) / 4096 * 4096;
  const std::string verify = fmt::format("{} {} ckpt verify {}/step_00000002.h5", without_parent_mpi_env(),
                                         trident_binary(), mnt);
  const std::string script = fmt::format(
      "set -u\n"
      "mount -t tmpfs -o size={size} tmpfs {mnt} || {{ echo 'MOUNT FAILED'; exit 97; }}\n"
      "cp {ckpt} {mnt}/ && echo step_00000002.h5 > {mnt}/latest\n"
      "for run in 1 2; do\n"
      "  {train} > {root}/out{np}_$run.txt 2>&1; echo \"RUN $run rc=$?\"\n"
      "  ls {mnt}; echo \"LATEST $(cat {mnt}/latest)\"\n"
      "done\n"
      "{verify} > /dev/null 2>&1; echo \"VERIFY rc=$?\"\n"
      "mount -o remount,ro,size={size} tmpfs {mnt}\n"
      "{train} > {root}/out{np}_ro.txt 2>&1; echo \"RUN ro rc=$?\"\n",
      fmt::arg("size", size), fmt::arg("mnt", mnt), fmt::arg("ckpt", ckpt), fmt::arg("train", train_command(np, mnt)),
      fmt::arg("root", root_dir()), fmt::arg("np", np), fmt::arg("verify", verify));
  write_file(root_dir() + fmt::format("/full{}.sh", np), script);
  std::string out;
  // A private mount namespace; without root, inside a user namespace (-r) where this user may mount.
  const std::string unshare = geteuid() == 0 ? "unshare -m" : "unshare -r -m";
  const int rc = run_command(fmt::format("{} --propagation private sh {}/full{}.sh", unshare, root_dir(), np), &out);
  ASSERT_THAT(out, Not(HasSubstr("MOUNT FAILED")))
      << "cannot mount a tmpfs in a private mount namespace (root, or user namespaces, are needed):\n" << out;
  ASSERT_EQ(rc, 0) << "`" << unshare << "` failed:\n" << out;

  // Both runs: exit 2, no partial file left, the step 2 checkpoint still the latest and valid.
  EXPECT_THAT(out, HasSubstr("RUN 1 rc=2")) << out;
  EXPECT_THAT(out, HasSubstr("RUN 2 rc=2")) << out;
  EXPECT_THAT(out, Not(HasSubstr(".tmp"))) << out;
  EXPECT_THAT(out, Not(HasSubstr("step_00000004.h5"))) << out;
  EXPECT_THAT(out, HasSubstr("LATEST step_00000002.h5")) << out;
  EXPECT_THAT(out, HasSubstr("VERIFY rc=0")) << out;
  for (const char* run : {"1", "2"}) {
    std::string log;
    run_command(fmt::format("cat {}/out{}_{}.txt", root_dir(), np, run), &log);
    EXPECT_THAT(log, HasSubstr("resumed from " + mnt + "/step_00000002.h5")) << log;
    EXPECT_THAT(log, HasSubstr(mnt + "/step_00000004.h5.tmp")) << log;
    EXPECT_THAT(log, HasSubstr(fmt::format("errno {}: No space left on device", ENOSPC))) << log;
    EXPECT_THAT(log, HasSubstr("bytes free on the file system of " + mnt)) << log;
    EXPECT_THAT(log, HasSubstr("the previous checkpoints and `latest` are unchanged")) << log;
    EXPECT_THAT(log, Not(HasSubstr("internal error"))) << log;
    EXPECT_THAT(log, Not(HasSubstr("fatal signal"))) << log;
  }
  // Read-only: a clear refusal at start-up, naming the directory.
  EXPECT_THAT(out, HasSubstr("RUN ro rc=2")) << out;
  std::string ro;
  run_command(fmt::format("cat {}/out{}_ro.txt", root_dir(), np), &ro);
  EXPECT_THAT(ro, HasSubstr(fmt::format("[checkpoint] dir = \"{}\" is not writable: Read-only file system", mnt))) << ro;
}

INSTANTIATE_TEST_SUITE_P(Ranks, CheckpointFullFileSystem, ::testing::Values(2, 4),
                         [](const auto& info) { return fmt::format("np{}", info.param); });

}  // namespace
}  // namespace trident::test
