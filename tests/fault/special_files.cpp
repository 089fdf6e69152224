// Special files where trident expects regular ones (issue #28, defects 1, 2, 7 and 9): a FIFO as the
// data or as a checkpoint directory's `latest`, /dev/zero behind `latest`, a `latest` naming a file
// outside its directory or holding binary, a `latest` that is a directory, and /dev/zero or
// /proc/self/mem as checkpoint.dir, checkpoint.resume or model.init_from. Each must be refused at once
// with a message naming the file (never a hang, never unbounded memory), and `check` must refuse what
// `train` refuses, with the same message.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fmt/format.h>

#include <filesystem>
#include <string>

#include "common/test_support.hpp"
#include "fault/run_job.hpp"

namespace fs = std::filesystem;

namespace trident::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Outcome {
  int status;
  std::string out;
};

// `trident ARGS` with a deadline: a process that blocks or runs away ends as 124 (timeout) or 137.
Outcome trident(const std::string& args, int seconds = 60, const std::string& prefix = "") {
  Outcome r;
  r.status = run_command(fmt::format("{}{} OPENBLAS_NUM_THREADS=1 timeout -k 5 {} {} {} 2>&1", prefix,
                                     without_parent_mpi_env(), seconds, trident_binary(), args),
                         &r.out);
  return r;
}

std::string deck_in(const std::string& dir) {
  write_file(dir + "/deck.toml", small_deck(1, 1, 1));
  return dir + "/deck.toml";
}

// The text of the first error line of a run, without its time stamp.
std::string error_line(const std::string& out) {
  const size_t at = out.find("[error] ");
  if (at == std::string::npos) return "";
  return out.substr(at, out.find('\n', at) - at);
}

// A checkpoint directory with the checkpoints of steps 1 and 2 of the small deck.
std::string trained_checkpoints(const std::string& dir) {
  const Outcome r = trident(fmt::format("train {} --set train.steps=2 --set checkpoint.dir={}/ckpt --set "
                                    "checkpoint.every_steps=1",
                                    deck_in(dir), dir));
  EXPECT_EQ(r.status, 0) << r.out;
  return dir + "/ckpt";
}

TEST(SpecialFiles, FifoAsDataPathIsRefusedAtOnceByTrainAndCheck) {
  const std::string dir = make_temp_dir("trident-special");
  const std::string fifo = dir + "/data.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const char* command : {"train", "check"}) {
    // Before the fix open() waited for a writer, and SIGTERM only set a flag: the timeout's SIGKILL ended it.
    const Outcome r = trident(fmt::format("{} {} --set data.path={}", command, deck_in(dir), fifo), 30);
    EXPECT_EQ(r.status, 2) << command << ":\n" << r.out;
    EXPECT_THAT(r.out, HasSubstr("cannot open '" + fifo + "': it is a FIFO (named pipe), not a regular file"))
        << command;
    EXPECT_THAT(r.out, Not(HasSubstr("step 1/"))) << command;
  }
}

TEST(SpecialFiles, LatestThatIsAFifoOrDevZeroIsReadWithABound) {
  const std::string dir = make_temp_dir("trident-special");
  const std::string ckpt = trained_checkpoints(dir);
  fs::remove(ckpt + "/latest");
  ASSERT_EQ(mkfifo((ckpt + "/latest").c_str(), 0600), 0);
  Outcome r = trident("ckpt list " + ckpt, 30);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr(ckpt + "/latest is not usable: cannot open '" + ckpt +
                               "/latest': it is a FIFO (named pipe), not a regular file"));
  EXPECT_THAT(r.out, HasSubstr("step_00000002.h5"));
  // A symlink to /dev/zero: before the fix `ckpt list` read it without end (2.4 GB in 5 s). Under a
  // 2 GB address-space limit a runaway read fails fast instead of filling the machine.
  fs::remove(ckpt + "/latest");
  fs::create_symlink("/dev/zero", ckpt + "/latest");
  r = trident("ckpt list " + ckpt, 30, "ulimit -v 2000000; ");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("it is a character device, not a regular file"));
  // inspect, verify and export go by the files instead, with a warning.
  r = trident("ckpt inspect " + ckpt, 30, "ulimit -v 2000000; ");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("going by the checkpoint files instead"));
  EXPECT_THAT(r.out, HasSubstr("checkpoint      " + ckpt + "/step_00000002.h5"));
}

TEST(SpecialFiles, LatestMayNameOnlyACheckpointOfItsOwnDirectory) {
  const std::string dir = make_temp_dir("trident-special");
  const std::string ckpt = trained_checkpoints(dir);
  const std::string elsewhere = dir + "/elsewhere";
  fs::create_directories(elsewhere);
  fs::copy_file(ckpt + "/step_00000001.h5", elsewhere + "/step_00000030.h5");
  for (const std::string& named : {elsewhere + "/step_00000030.h5", std::string("../elsewhere/step_00000030.h5")}) {
    write_file(ckpt + "/latest", named + "\n");
    // Before the fix the export took the model from outside the directory (exit 0), and a ../ path was
    // cut to its file name.
    const Outcome r = trident(fmt::format("ckpt export {} --out {}/export", ckpt, dir), 60);
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_THAT(r.out, HasSubstr("is not usable: it holds \"" + named + "\", not the name of a checkpoint file of"));
    EXPECT_THAT(r.out, HasSubstr("exported " + ckpt + "/step_00000002.h5")) << named;
    EXPECT_THAT(r.out, Not(HasSubstr("exported " + elsewhere))) << named;
  }
  // Binary content is shown with its unprintable bytes replaced, not written raw to the terminal.
  write_file(ckpt + "/latest", std::string("\x01\x02\xff", 3));
  const Outcome r = trident("ckpt list " + ckpt, 30);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("is not usable: it holds \"???\""));
  EXPECT_THAT(r.out, Not(HasSubstr("\x01")));
}

TEST(SpecialFiles, LatestThatIsADirectoryIsRefusedBeforeTraining) {
  const std::string dir = make_temp_dir("trident-special");
  fs::create_directories(dir + "/ckpt/latest");
  for (const char* command : {"check", "train"}) {
    // Before the fix `train` found it only at its first checkpoint, after the training it could not save.
    const Outcome r = trident(fmt::format("{} {} --set train.steps=2 --set checkpoint.dir={}/ckpt", command, deck_in(dir), dir));
    EXPECT_EQ(r.status, 2) << command << ":\n" << r.out;
    EXPECT_THAT(r.out, HasSubstr("holds a directory as " + dir + "/ckpt/latest")) << command;
    EXPECT_THAT(r.out, Not(HasSubstr("step 1/"))) << command;
  }
}

// Every path key set to a special file: `check` refuses it exactly as `train` does (before the fix
// `check` passed them all and `train` refused them).
class PathKeySpecialFile : public ::testing::TestWithParam<std::tuple<const char*, const char*>> {};

TEST_P(PathKeySpecialFile, CheckRefusesWhatTrainRefusesWithTheSameMessage) {
  const auto [key, path] = GetParam();
  const std::string dir = make_temp_dir("trident-special");
  const std::string args = fmt::format("{} --set train.steps=1 --set {}={}", deck_in(dir), key, path);
  const Outcome check = trident("check " + args);
  const Outcome train = trident("train " + args);
  EXPECT_EQ(check.status, 2) << check.out;
  EXPECT_EQ(train.status, 2) << train.out;
  EXPECT_THAT(train.out, Not(HasSubstr("step 1/")));
  EXPECT_THAT(error_line(check.out), HasSubstr(path)) << check.out;
  EXPECT_EQ(error_line(check.out), error_line(train.out)) << "check:\n" << check.out << "\ntrain:\n" << train.out;
}

INSTANTIATE_TEST_SUITE_P(
    Keys, PathKeySpecialFile,
    ::testing::Combine(::testing::Values("checkpoint.dir", "checkpoint.resume", "model.init_from"),
                       ::testing::Values("/dev/zero", "/proc/self/mem")),
    [](const auto& info) {
      std::string name = std::string(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
      for (char& c : name)
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      return name;
    });

}  // namespace
}  // namespace trident::test
