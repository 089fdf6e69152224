// GoogleTest main for tests that may run under mpiexec at any rank count.
// Every rank runs every test; failures are printed with the rank that saw them, and the job's exit
// code is the worst over all ranks (MPI_Allreduce MAX), so ctest sees one verdict for the whole job.
// `--gtest_list_tests` is answered by rank 0 alone, so discovery does not multiply tests.
// A skip must not read as a pass: outside the `gpu` and `slurm` labels (TRIDENT_TEST_MAY_SKIP, set by
// tests/CMakeLists.txt) the only accepted skip is a case marked not applicable here; any other fails
// the job. ctest reports an entry in which no test ran as Skipped.
#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/blas_runtime.hpp"
#include "core/fatal.hpp"
#include "core/log.hpp"
#include "common/test_support.hpp"

namespace {

class RankPrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankPrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (r.failed()) {
      std::fprintf(stderr, "[rank %d] FAILURE %s:%d\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
    }
  }

 private:
  int rank_;
};

// Skips that are not "not applicable here" cases, printed; their count.
int count_unexpected_skips(int rank) {
  if (std::getenv("TRIDENT_TEST_MAY_SKIP")) return 0;
  const testing::UnitTest& unit = *testing::UnitTest::GetInstance();
  const std::string allowed = trident::test::kNotApplicable;
  int count = 0;
  for (int s = 0; s < unit.total_test_suite_count(); ++s) {
    const testing::TestSuite& suite = *unit.GetTestSuite(s);
    for (int t = 0; t < suite.total_test_count(); ++t) {
      const testing::TestInfo& info = *suite.GetTestInfo(t);
      const testing::TestResult& result = *info.result();
      if (!result.Skipped()) continue;
      for (int p = 0; p < result.total_part_count(); ++p) {
        const std::string message = result.GetTestPartResult(p).message();
        if (!result.GetTestPartResult(p).skipped() || message.rfind(allowed, 0) == 0) continue;
        std::fprintf(stderr, "[rank %d] SKIPPED, WHICH ONLY gpu AND slurm TESTS MAY: %s.%s: %s\n", rank,
                     suite.name(), info.name(), message.c_str());
        ++count;
      }
    }
  }
  return count;
}

}  // namespace

int main(int argc, char** argv) {
  trident::tune_blas_for_this_cpu(argc, argv);
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  trident::log::init(rank, size);
  trident::install_fatal_handlers();
  Kokkos::initialize(argc, argv);
  testing::InitGoogleTest(&argc, argv);

  bool listing = false;
  for (int i = 1; i < argc; ++i) listing |= std::strcmp(argv[i], "--gtest_list_tests") == 0;
  int result = 0;
  if (!listing || rank == 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    if (rank != 0) delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankPrinter(rank));
    result = RUN_ALL_TESTS();
    if (count_unexpected_skips(rank) > 0) result = 1;
  }
  int worst = result;
  if (!listing) MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  Kokkos::finalize();
  MPI_Finalize();
  return worst;
}
