// A rank that throws ends the whole job: `mpiexec -n 4 comm_abort_helper MODE`, where rank 2 throws
// trident::Error inside run_or_abort while ranks 0, 1 and 3 wait in a collective it never joins.
// The job must exit non-zero within seconds (a hang is cut by `timeout` here and by the ctest
// TIMEOUT), print the error once, tagged with rank 2, and no rank may get past its collective.
#include <gtest/gtest.h>

#include <chrono>
#include <sstream>
#include <string>

#include "common/test_support.hpp"

namespace {

int count_lines_with(const std::string& text, const std::string& needle, std::string* line = nullptr) {
  std::istringstream in(text);
  std::string l;
  int n = 0;
  while (std::getline(in, l)) {
    if (l.find(needle) != std::string::npos) {
      ++n;
      if (line) *line = l;
    }
  }
  return n;
}

class AbortTest : public ::testing::TestWithParam<const char*> {};

TEST_P(AbortTest, OneThrowingRankEndsTheJobQuickly) {
  const std::string cmd = std::string("OPENBLAS_NUM_THREADS=1 timeout -k 3 15 ") + trident::test::local_mpiexec() + " -n 4 " +
                          TRIDENT_ABORT_HELPER + " " + GetParam();
  const auto t0 = std::chrono::steady_clock::now();
  std::string out;
  const int rc = trident::test::run_command(cmd, &out);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  SCOPED_TRACE("command: " + cmd + "\noutput:\n" + out);

  EXPECT_NE(rc, 0) << "the job succeeded although rank 2 threw";
  EXPECT_NE(rc, 124) << "the job hung (killed by timeout after 15 s)";
  EXPECT_NE(rc, 137) << "the job hung (killed by timeout after 15 s)";
  // mpiexec start-up is ~0.4 s and rank 2 waits 0.3 s before throwing.
  EXPECT_LT(seconds, 8.0) << "the job took too long to end";

  std::string line;
  EXPECT_EQ(count_lines_with(out, "injected failure for the abort test", &line), 1) << "error not printed exactly once";
  EXPECT_NE(line.find("rank 2"), std::string::npos) << line;
  EXPECT_NE(line.find("(rank 2 of 4 ends the job)"), std::string::npos) << line;
  EXPECT_EQ(out.find("collective completed without rank 2"), std::string::npos);
  EXPECT_EQ(out.find("unknown mode"), std::string::npos);
  EXPECT_EQ(out.find("fatal signal"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Modes, AbortTest,
                         ::testing::Values("barrier", "allreduce-block", "allreduce-poll", "mesh-poll"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (auto& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

}  // namespace
