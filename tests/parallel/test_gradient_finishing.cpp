// The order of gradient finishing (train/gradient_finisher.hpp): the phases that run between the last
// backward of a step and the optimizer update, for the serial run (1 rank) and for a layout that needs
// every phase (8 ranks: tp 2 with sequence parallelism, pp 2 with the tied embedding split over the edge
// stages, dp 2 with ZeRO-1). The reductions share buffers: a DP bucket still in flight must be waited
// for before any other reduction touches the gradients, and the tied embedding's DP reduction must
// follow its cross-stage sum; the norm follows every reduction, and clipping the norm.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/test_support.hpp"
#include "parallel/parallel_test_util.hpp"

namespace trident {
namespace {

using ::testing::ElementsAre;

TEST(GradientFinishing, PhasesRunInTheOrderTheSharedBuffersNeed) {
  const int n = test::world_size();
  if (n != 1 && n != 8) TRIDENT_SKIP_NOT_APPLICABLE("the layouts here use 1 and 8 ranks");
  std::vector<std::string> mesh;
  if (n == 8) mesh = {"mesh.tp=2", "mesh.pp=2", "mesh.dp=2", "mesh.sequence_parallel=true", "mesh.zero=1"};
  const Config cfg = test::small_deck(1009, mesh);
  ASSERT_TRUE(cfg.model.tie_embeddings);
  std::unique_ptr<ParallelMesh> parallel;
  if (n > 1) parallel = std::make_unique<ParallelMesh>(MPI_COMM_WORLD, cfg.mesh, cfg.runtime.mpi_wait);
  const test::RunResult run = test::run_steps(cfg, parallel.get(), 1);
  if (n == 1) {
    EXPECT_THAT(run.finishing_phases, ElementsAre("norm", "clip"));
  } else {
    EXPECT_THAT(run.finishing_phases,
                ElementsAre("dp_buckets", "tp_replicated", "tied_embedding", "dp_deferred", "norm", "clip"));
  }
}

}  // namespace
}  // namespace trident
