// Where log lines go, as HPC job logs expect them (Slurm's --output and --error): `train` prints
// information on stdout and warnings and errors on stderr; a command whose stdout is its result
// (`check`) keeps every log line on stderr.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "common/test_support.hpp"
#include "train/train_run_util.hpp"

namespace trident::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Streams {
  int rc = -1;
  std::string out, err;
};

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// `trident ARGS` on `np` ranks in `dir` (which holds deck.toml), stdout and stderr kept apart.
Streams run_apart(const std::string& dir, int np, const std::string& args) {
  Streams r;
  std::string ignored;
  r.rc = run_command(fmt::format("(cd {} && {} OPENBLAS_NUM_THREADS=1 timeout -k 5 120 {} -n {} {} {} >stdout.txt "
                                 "2>stderr.txt)",
                                 dir, without_parent_mpi_env(), local_mpiexec(), np, trident_binary(), args),
                     &ignored);
  r.out = read_text(dir + "/stdout.txt");
  r.err = read_text(dir + "/stderr.txt");
  return r;
}

TEST(LogStreams, TrainInformsOnStdoutAndWarnsOnStderr) {
  const std::string dir = make_temp_dir("trident-log");
  write_file(dir + "/deck.toml", kTinyTextDeck);
  // vocab_size 512 with text: the deck warning about byte tokens.
  const Streams r = run_apart(dir, 2, "train deck.toml --set mesh.dp=2 --set train.steps=2 --set model.vocab_size=512");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("[info] [rank 0] trident train deck.toml"));
  EXPECT_THAT(r.out, HasSubstr("run summary: 2 step(s)"));
  EXPECT_THAT(r.out, Not(HasSubstr("[warning]")));
  EXPECT_THAT(r.err, HasSubstr("[warning] [rank 0] deck.toml"));
  EXPECT_THAT(r.err, HasSubstr("trains on bytes"));
  EXPECT_THAT(r.err, Not(HasSubstr("[info]")));
  // An error: on stderr, with nothing on stdout after the failure.
  const Streams bad = run_apart(dir, 1, "train deck.toml --set data.path=" + dir + "/missing.txt");
  EXPECT_EQ(bad.rc, 2);
  EXPECT_THAT(bad.err, HasSubstr("[error]"));
  EXPECT_THAT(bad.err, HasSubstr("missing.txt"));
  EXPECT_THAT(bad.out, Not(HasSubstr("[error]")));
}

TEST(LogStreams, CheckKeepsItsStdoutForItsReport) {
  const std::string dir = make_temp_dir("trident-log");
  write_file(dir + "/deck.toml", kTinyTextDeck);
  const Streams r = run_apart(dir, 1, "check deck.toml --set model.vocab_size=512");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("# resolved configuration of deck.toml"));
  EXPECT_THAT(r.out, Not(HasSubstr("[warning]")));
  EXPECT_THAT(r.out, Not(HasSubstr("[info]")));
  EXPECT_THAT(r.err, HasSubstr("trains on bytes"));
}

}  // namespace
}  // namespace trident::test
