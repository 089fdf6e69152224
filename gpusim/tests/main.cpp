// main() of gpu-sim's tests: MPI with MPI_THREAD_MULTIPLE (gpu-sim's NCCL runs MPI on stream worker
// threads), GoogleTest on every rank, and one verdict for the job: it fails if any rank failed. A
// skip fails too: every gpu-sim test runs everywhere (a machine without a GPU is what gpu-sim is for).
// Rank 0 prints the report; every other rank prints its own failures.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

namespace {

// Rank 0 prints GoogleTest's report; the other ranks name their failures and where they were found.
void report_failures(const testing::UnitTest& unit, int rank) {
  for (int i = 0; i < unit.total_test_suite_count(); ++i) {
    const testing::TestSuite& suite = *unit.GetTestSuite(i);
    for (int j = 0; j < suite.total_test_count(); ++j) {
      const testing::TestInfo& test = *suite.GetTestInfo(j);
      const testing::TestResult& result = *test.result();
      if (!result.Failed()) continue;
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank, suite.name(), test.name());
      for (int k = 0; k < result.total_part_count(); ++k) {
        const testing::TestPartResult& part = result.GetTestPartResult(k);
        if (part.failed())
          std::fprintf(stderr, "[rank %d]   %s:%d: %s\n", rank, part.file_name() ? part.file_name() : "?",
                       part.line_number(), part.summary());
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    std::fprintf(stderr, "gpu-sim's tests need MPI_THREAD_MULTIPLE (the MPI library provides level %d)\n", provided);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  testing::InitGoogleTest(&argc, argv);
  auto& listeners = testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) delete listeners.Release(listeners.default_result_printer());
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  const testing::UnitTest& unit = *testing::UnitTest::GetInstance();
  if (rank != 0) report_failures(unit, rank);
  if (unit.skipped_test_count() > 0) {
    std::fprintf(stderr, "[rank %d] %d test(s) skipped: no gpu-sim test may skip\n", rank, unit.skipped_test_count());
    failed = 1;
  }
  if (unit.test_to_run_count() == 0) {
    std::fprintf(stderr, "[rank %d] no test ran\n", rank);
    failed = 1;
  }
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any_failed;
}
