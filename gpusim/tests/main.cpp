// main() of gpu-sim's tests: MPI with MPI_THREAD_MULTIPLE (gpu-sim's NCCL runs MPI on stream worker
// threads), GoogleTest on every rank, and one verdict for the job: it fails if any rank failed. A
// skip fails too: every gpu-sim test runs everywhere (a machine without a GPU is what gpu-sim is for).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  testing::InitGoogleTest(&argc, argv);
  auto& listeners = testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) delete listeners.Release(listeners.default_result_printer());
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  const testing::UnitTest& unit = *testing::UnitTest::GetInstance();
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
