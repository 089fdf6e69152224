// The watchdog (runtime.collective_timeout_s): one rank of a training job is stopped with SIGSTOP
// after a few steps; the others must end the whole job within the limit plus a few seconds, with one
// message that names the operation, the group, the step and the rank(s) that did not arrive, and exit
// code 4. Without the watchdog the job never ends (the test's own limit then fails it).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/test_support.hpp"
#include "fault/run_job.hpp"

namespace trident::test {
namespace {

constexpr double kTimeoutS = 3;

struct StopCase {
  const char* name;
  int tp, pp, dp;
  int stopped_rank;
  std::vector<std::string> expected;  // the message contains one of these (the awaited rank, when known)
};

class WatchdogTest : public ::testing::TestWithParam<StopCase> {};

TEST_P(WatchdogTest, StoppedRankEndsTheJobWithinTheLimit) {
  const StopCase c = GetParam();
  const int ranks = c.tp * c.pp * c.dp;
  const std::string dir = make_temp_dir("trident-watchdog");
  const std::string metrics = dir + "/metrics.jsonl";
  write_file(dir + "/deck.toml",
             small_deck(c.tp, c.pp, c.dp, fmt::format("collective_timeout_s = {}\nmetrics = \"{}\"", kTimeoutS, metrics)));
  const std::string cmd = fmt::format("{} OPENBLAS_NUM_THREADS=1 {} -n {} {} train {}/deck.toml", without_parent_mpi_env(),
                                      local_mpiexec(), ranks, trident_binary(), dir);
  BackgroundJob job(cmd, dir + "/out.txt");
  ASSERT_TRUE(wait_until([&] { return count_lines(metrics) >= 3 || job.wait_for(0); }, 120))
      << "the job did not reach step 3:\n" << job.output();
  ASSERT_FALSE(job.wait_for(0)) << "the job ended before the rank was stopped:\n" << job.output();
  const pid_t victim = job.rank_pid(c.stopped_rank);
  ASSERT_GT(victim, 0) << "no process with PMI_RANK=" << c.stopped_rank;
  ASSERT_EQ(kill(victim, SIGSTOP), 0);
  const auto stopped_at = std::chrono::steady_clock::now();

  const auto status = job.wait_for(kTimeoutS + 30);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped_at).count();
  const std::string out = job.output();
  SCOPED_TRACE("command: " + cmd + "\noutput:\n" + out);
  ASSERT_TRUE(status) << "the job still runs " << kTimeoutS + 30 << " s after rank " << c.stopped_rank
                      << " was stopped: no watchdog";
  // Printed for benchmarks/README.md: time from the stop to the end of the whole job.
  std::printf("[ watchdog ] %d ranks (tp %d pp %d dp %d): job ended %.2f s after SIGSTOP of rank %d (limit %.0f s)\n",
              ranks, c.tp, c.pp, c.dp, seconds, c.stopped_rank, kTimeoutS);
  EXPECT_EQ(*status, 4) << "exit status";
  EXPECT_GE(seconds, kTimeoutS - 0.5) << "ended before the limit";
  EXPECT_LT(seconds, kTimeoutS + 10) << "ended too long after the limit";
  const auto first = out.find("watchdog: ");
  ASSERT_NE(first, std::string::npos) << "no watchdog message";
  EXPECT_EQ(out.find("watchdog: ", first + 1), std::string::npos) << "more than one watchdog message";
  const std::string line = out.substr(first, out.find('\n', first) - first);
  EXPECT_NE(line.find("on group '"), std::string::npos) << line;
  EXPECT_NE(line.find("at step "), std::string::npos) << line;
  EXPECT_NE(line.find("runtime.collective_timeout_s = 3"), std::string::npos) << line;
  EXPECT_TRUE(std::any_of(c.expected.begin(), c.expected.end(),
                          [&](const std::string& e) { return line.find(e) != std::string::npos; }))
      << line;
  EXPECT_EQ(out.find("internal error"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, WatchdogTest,
    ::testing::Values(
        // A DP all-reduce partner stopped: the other rank names it among the group's members.
        StopCase{"dp2", 1, 1, 2, 1, {"ranks that did not arrive: among world ranks 1 "}},
        // Rank 0 stopped: the other rank reports after its stagger (0.3 s per rank).
        StopCase{"dp2_rank0", 1, 1, 2, 0, {"ranks that did not arrive: among world ranks 0 "}},
        // A pipeline neighbour stopped: the waiting stage names its send/recv peer (or, in the loss
        // broadcast, its group).
        StopCase{"pp2", 1, 2, 1, 1, {"rank that did not arrive: world rank 1", "among world ranks 1 "}},
        // Larger jobs: some ranks wait on ranks that themselves wait; any watchdog message will do.
        StopCase{"tp2_dp2", 2, 1, 2, 3, {"did not arrive"}},
        StopCase{"pp2_dp4", 1, 2, 4, 5, {"did not arrive"}}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace trident::test
