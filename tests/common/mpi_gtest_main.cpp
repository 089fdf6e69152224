// GoogleTest main for tests that may run under mpiexec at any rank count.
// Every rank runs every test; failures are printed with the rank that saw them, and the job's exit
// code is the worst over all ranks (MPI_Allreduce MAX), so ctest sees one verdict for the whole job.
// `--gtest_list_tests` is answered by rank 0 alone, so discovery does not multiply tests.
// A skip must not read as a pass: outside the `gpu` and `slurm` labels (TRIDENT_TEST_MAY_SKIP, set by
// tests/CMakeLists.txt) the only accepted skip is a case marked not applicable here; any other fails
// the job. An entry in which every test was skipped on every rank, and none failed, exits with
// kAllSkipped, which ctest reports as Skipped (SKIP_RETURN_CODE), and so is one whose global test
// environment skipped; one in which no test ran at all (a filter that matches nothing) fails.
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
#include "core/mpi_start.hpp"
#include "train/stop_signals.hpp"

namespace {

constexpr int kAllSkipped = 77;  // tests/CMakeLists.txt: SKIP_RETURN_CODE

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

// A skip in a global environment's SetUp (the GPU runs of the parallel suites without a GPU) keeps
// every test from running while gtest counts them as passed: the whole entry is skipped.
bool environment_skipped(const testing::UnitTest& unit) {
  const testing::TestResult& r = unit.ad_hoc_test_result();
  for (int p = 0; p < r.total_part_count(); ++p)
    if (r.GetTestPartResult(p).skipped()) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  trident::tune_blas_for_this_cpu(argc, argv);
  // A re-execution above leaves SIGUSR1, SIGTERM and SIGINT blocked; the test programs install no
  // handler here, so the default actions (and the handlers a test installs) apply again.
  trident::unblock_stop_signals();
  trident::start_mpi(&argc, &argv, TRIDENT_BUILD_MPI_THREADS);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  trident::log::init(rank, size);
  trident::install_fatal_handlers();
  Kokkos::initialize(argc, argv);
  testing::InitGoogleTest(&argc, argv);

  bool listing = false;
  for (int i = 1; i < argc; ++i) listing |= std::strcmp(argv[i], "--gtest_list_tests") == 0;
  int failed = 0, all_skipped = 0;
  if (!listing || rank == 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    if (rank != 0) delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankPrinter(rank));
    failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
    if (count_unexpected_skips(rank) > 0) failed = 1;
    const testing::UnitTest& unit = *testing::UnitTest::GetInstance();
    if (!listing && unit.test_to_run_count() == 0) {
      std::fprintf(stderr, "[rank %d] NO TEST RAN: the filter matches no test of this program\n", rank);
      failed = 1;
    }
    all_skipped = unit.test_to_run_count() > 0 && unit.skipped_test_count() == unit.test_to_run_count() ? 1 : 0;
    if (environment_skipped(unit)) {
      all_skipped = 1;
      if (!std::getenv("TRIDENT_TEST_MAY_SKIP")) {
        std::fprintf(stderr, "[rank %d] SKIPPED (every test, by the test environment), WHICH ONLY gpu AND slurm "
                     "TESTS MAY\n", rank);
        failed = 1;
      }
    }
  }
  // One verdict for the job: a failure on any rank fails it; it is skipped only if every rank skipped all.
  int any_failed = failed, every_rank_skipped = all_skipped;
  if (!listing) {
    MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&all_skipped, &every_rank_skipped, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  }
  Kokkos::finalize();
  MPI_Finalize();
  if (any_failed) return 1;
  return every_rank_skipped ? kAllSkipped : 0;
}
