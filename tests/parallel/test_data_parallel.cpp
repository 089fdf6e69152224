// Data parallelism (and full 3D layouts) against the serial run, with gradient accumulation on.
// Registered at 1, 2, 4 and 8 ranks. Tolerances (fp32): per-step losses within 1e-5 relative, and every
// parameter after 5 steps within 1e-5 of the serial run's (absolute: parameters are O(0.01-1) and five
// AdamW steps of lr 1e-3 move an element by at most 5e-3; a relative norm would be dominated by
// rounding on the zero-initialised biases). Parallelism only changes the order of sums.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>

#include "common/test_support.hpp"
#include "core/error.hpp"
#include "parallel/parallel_test_util.hpp"

namespace trident::test {
namespace {

const std::vector<std::string> kWorkload = {"model.layers=4", "train.global_batch=16", "train.micro_batch=2",
                                            "model.vocab_pad_to=8"};

// param_tol: see ThreeDimensionalLayoutMatchesSerial for why a 3D layout gets a looser bound.
void expect_matches_serial(const std::vector<std::string>& layout, float param_tol = 1e-5f) {
  auto overrides = kWorkload;
  overrides.insert(overrides.end(), layout.begin(), layout.end());
  const Config cfg = small_deck(1009, overrides);
  const RunResult serial = run_steps(small_deck(1009, kWorkload), nullptr, 5);
  ParallelMesh mesh(MPI_COMM_WORLD, cfg.mesh, cfg.runtime.mpi_wait);
  const RunResult par = run_steps(cfg, &mesh, 5);
  for (size_t s = 0; s < serial.losses.size(); ++s)
    EXPECT_NEAR(par.losses[s], serial.losses[s], 1e-5 * serial.losses[s]) << "step " << s + 1;
  for (const auto& [name, g] : par.step1_grads)
    EXPECT_LE(relative_l2(g, serial.step1_grads.at(name)), 1e-5) << name << " (gradient after step 1)";
  ASSERT_FALSE(par.final_params.empty());
  for (const auto& [name, p] : par.final_params) {
    const auto& ref = serial.final_params.at(name);
    if (name.size() > 16 && name.compare(name.size() - 16, 16, "attn.c_attn.bias") == 0) {
      // The key third of the QKV bias shifts every attention score of a row equally, which softmax
      // ignores: its true gradient is exactly 0 and both runs see only rounding noise, which AdamW
      // normalises into steps of up to lr. Query and value thirds are compared as usual; the key
      // third may drift by at most steps * lr.
      const size_t third = p.size() / 3;
      for (size_t i = 0; i < p.size(); ++i) {
        const bool key = i >= third && i < 2 * third;
        EXPECT_LE(std::abs(p[i] - ref[i]), key ? 5 * 1e-3 : param_tol) << name << " element " << i;
      }
      continue;
    }
    float worst = 0;
    for (size_t i = 0; i < p.size(); ++i) worst = std::max(worst, std::abs(p[i] - ref[i]));
    EXPECT_LE(worst, param_tol) << name;
  }
}

TEST(DataParallel, WholeWorldAsDataParallelMatchesSerial) {
  // dp = world size: each rank takes global_batch/dp samples in 16/(2*dp) accumulated micro-batches.
  expect_matches_serial({fmt::format("mesh.dp={}", world_size())});
}

TEST(DataParallel, ThreeDimensionalLayoutMatchesSerial) {
  if (world_size() != 8) GTEST_SKIP() << "the 3D layout needs 8 ranks";
  // Measured: step-1 gradients agree to 4e-7 relative, yet after 5 steps one tensor
  // (h.2.attn.c_proj.weight) differs by up to 1.6e-5: AdamW divides each element's moment by its
  // RMS, so elements whose gradient is near zero turn rounding-level differences into steps of
  // order lr. The parameter bound is 5e-5 here; gradients are held to 1e-5 relative.
  expect_matches_serial({"mesh.tp=2", "mesh.pp=2", "mesh.dp=2", "mesh.schedule=1f1b", "mesh.sequence_parallel=true"},
                        5e-5f);
}

TEST(DataParallel, ZeroShardingIsRefusedUntilBuilt) {
  if (world_size() < 2) GTEST_SKIP() << "ZeRO needs dp > 1";
  auto overrides = kWorkload;
  overrides.push_back(fmt::format("mesh.dp={}", world_size()));
  overrides.push_back("mesh.zero=1");
  const Config cfg = small_deck(1009, overrides);
  ParallelMesh mesh(MPI_COMM_WORLD, cfg.mesh, cfg.runtime.mpi_wait);
  EXPECT_THROW(run_steps(cfg, &mesh, 1), NotImplemented);
}

}  // namespace
}  // namespace trident::test
