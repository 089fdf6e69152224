// Signals a running job gets from outside: SIGBUS when a memory-mapped data file is truncated under
// it (the message must name the file and the offset), and SIGUSR1 (Slurm's "checkpoint now") during
// start-up or with checkpoints off (never lost, never silent, never the end of the job).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/test_support.hpp"
#include "fault/run_job.hpp"

namespace trident::test {
namespace {

TEST(Signals, TruncatedDataFileNamesTheFileAndOffset) {
  const std::string dir = make_temp_dir("trident-sigbus");
  const std::string data = dir + "/data.txt";
  std::filesystem::copy_file("/usr/share/common-licenses/GPL-3", data);
  const std::string metrics = dir + "/m.jsonl";
  write_file(dir + "/deck.toml", small_deck(1, 1, 1, "metrics = \"" + metrics + "\""));
  BackgroundJob job(without_parent_mpi_env() + " OPENBLAS_NUM_THREADS=1 " + trident_binary() + " train " + dir +
                        "/deck.toml --set data.path=" + data,
                    dir + "/out.txt");
  ASSERT_TRUE(wait_until([&] { return count_lines(metrics) >= 2 || job.wait_for(0); }, 60)) << job.output();
  ASSERT_FALSE(job.wait_for(0)) << job.output();
  std::filesystem::resize_file(data, 0);
  const auto status = job.wait_for(30);
  const std::string out = job.output();
  ASSERT_TRUE(status) << "still running 30 s after its data file was truncated:\n" << out;
  // 128 + SIGBUS under mpiexec; a singleton's MPI_Abort exits 1 whatever the code.
  EXPECT_NE(*status, 0) << out;
  EXPECT_NE(out.find("fatal signal SIGBUS reading " + data + " at byte offset "), std::string::npos) << out;
  EXPECT_NE(out.find("truncated or replaced while the job ran"), std::string::npos) << out;
}

// Starts a 3-step run and sends SIGUSR1 as soon as the process catches it: with the fix, from the
// start of main, before MPI_Init; before the fix, only once TrainingCheckpoints had installed its handler
// (with checkpoint.dir), or never (then the signal is sent after 20 s and ends the process).
std::string run_with_early_usr1(const std::string& dir, const std::string& args) {
  write_file(dir + "/deck.toml", small_deck(1, 1, 1));
  BackgroundJob job(without_parent_mpi_env() + " OPENBLAS_NUM_THREADS=1 " + trident_binary() + " train " + dir +
                        "/deck.toml --set train.steps=3 " + args,
                    dir + "/out.txt");
  pid_t pid = -1;
  wait_until(
      [&] {
        pid = job.process_named();
        return (pid > 0 && catches_signal(pid, SIGUSR1)) || job.wait_for(0);
      },
      20);
  EXPECT_GT(pid, 0) << job.output();
  if (pid > 0) kill(pid, SIGUSR1);
  const auto status = job.wait_for(120);
  const std::string out = job.output();
  EXPECT_TRUE(status && *status == 0) << "the run did not finish normally:\n" << out;
  return out;
}

TEST(Signals, Usr1DuringStartUpCheckpointsAfterTheFirstStep) {
  const std::string dir = make_temp_dir("trident-usr1");
  const std::string out = run_with_early_usr1(dir, "--set checkpoint.dir=" + dir + "/ckpt");
  EXPECT_NE(out.find("SIGUSR1 received during start-up: a checkpoint follows step 1"), std::string::npos) << out;
  EXPECT_NE(out.find("checkpoint: step 1 (requested)"), std::string::npos) << out;
}

TEST(Signals, Usr1WithoutCheckpointDirIsLogged) {
  const std::string dir = make_temp_dir("trident-usr1");
  const std::string out = run_with_early_usr1(dir, "");
  EXPECT_NE(out.find("no checkpoint is written because [checkpoint] dir is empty"), std::string::npos) << out;
}

}  // namespace
}  // namespace trident::test
