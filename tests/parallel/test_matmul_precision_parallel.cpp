// bf16 GEMM operands (train.matmul_precision = "bf16") on the parallel layouts against the serial run of
// the same deck: TP with sequence parallelism, the pipeline schedules, DP under ZeRO 1-3, and 3D
// (tp 2 x pp 2 x dp 2) at 8 ranks. The serial bf16 run is also checked to differ from the serial fp32
// run by far more than these tolerances, so that they could tell a layout that lost the rounding.
//
// Tolerance. The layouts reorder fp32 sums as in fp32, which moves values by about δ ~ 1e-7 relative
// (test_data_parallel.cpp). Rounding a GEMM operand to bf16 turns that into a one-unit change
// (2^-8 relative) for the fraction ~δ / 2^-8 of the elements that lie that close to a rounding
// boundary: the mean change stays ~δ, but its root mean square becomes sqrt(δ 2^-8) ~ 2e-5 per
// GEMM, hundreds of times the fp32 deviation, and it compounds through the layers and AdamW. Measured
// with TRIDENT_TEST_REPORT_ERRORS (largest over the layouts; TP dominates, PP adds none):
//                        loss/norm   gradient step 1   later gradients   parameters
//   layouts, bf16        9.6e-5      1.1e-3            3.9e-3            1.0e-3
//   layouts, fp32 (tp2)  4.7e-8      5.2e-7            5.5e-6            4.8e-6
//   bf16 vs fp32 serial  1.1e-3      4.7e-3            8.3e-3            2.9e-3
// The bounds are about 2-3x the bf16 layouts' deviations. The step-1 gradient and loss bounds stay below
// what bf16 changes (last row), so a layout that skipped the rounding would fail, and the second test
// checks that margin on the serial runs.
#include <gtest/gtest.h>

#include <cmath>

#include "common/test_support.hpp"
#include "parallel/parallel_test_util.hpp"

namespace trident::test {
namespace {

const Tolerance kBf16Tolerance{/*loss=*/3e-4, /*gradient=*/2.5e-3, /*later_gradient=*/1e-2, /*parameter=*/3e-3f};

const std::vector<std::string> kBf16 = {"train.matmul_precision=bf16", "train.global_batch=16", "train.micro_batch=2"};

std::vector<NamedLayout> layouts() {
  return {
      {"tp2_sp", 2, {"mesh.tp=2", "mesh.sequence_parallel=true"}},
      {"pp2_1f1b", 2, {"mesh.pp=2"}},
      {"pp2_gpipe_full", 2, {"mesh.pp=2", "mesh.schedule=gpipe", "train.recompute=full"}},
      {"dp2_zero1", 2, {"mesh.dp=2", "mesh.zero=1"}},
      {"dp2_zero3", 2, {"mesh.dp=2", "mesh.zero=3"}},
      {"tp2_pp2", 4, {"mesh.tp=2", "mesh.pp=2"}},
      {"pp2_dp2_interleaved", 4,
       {"model.layers=4", "mesh.pp=2", "mesh.dp=2", "mesh.schedule=interleaved", "mesh.virtual_stages=2"}},
      {"dp4_zero2", 4, {"mesh.dp=4", "mesh.zero=2"}},
      {"tp2_pp2_dp2_zero1", 8, {"mesh.tp=2", "mesh.pp=2", "mesh.dp=2", "mesh.zero=1"}},
  };
}

TEST(MatmulPrecisionParallel, EveryLayoutOfThisRankCountMatchesSerialBf16) {
  const int run = expect_layouts_match_serial(layouts(), kBf16, kBf16Tolerance);
  EXPECT_GT(run, 0) << "no layout has " << world_size() << " ranks: register this test at 2, 4 or 8";
}

TEST(MatmulPrecisionParallel, SerialBf16DiffersFromFp32ByMoreThanTheTolerance) {
  const RunResult& bf16 = serial_run(small_deck(1009, kBf16), 5);
  std::vector<std::string> fp32_keys = kBf16;
  fp32_keys[0] = "train.matmul_precision=fp32";
  const RunResult& fp32 = serial_run(small_deck(1009, fp32_keys), 5);
  ASSERT_FALSE(bf16.grads.empty());
  double gradient = 0, norm = 0;
  for (const auto& [name, g] : bf16.grads[0]) gradient = std::max(gradient, relative_l2(g, fp32.grads[0].at(name)));
  for (size_t s = 0; s < bf16.grad_norms.size(); ++s)
    norm = std::max(norm, std::fabs(bf16.grad_norms[s] - fp32.grad_norms[s]) / fp32.grad_norms[s]);
  EXPECT_GT(gradient, 1.5 * kBf16Tolerance.gradient) << "bf16 operands changed the step-1 gradients by only " << gradient;
  EXPECT_GT(norm, 2 * kBf16Tolerance.loss) << "bf16 operands changed the gradient norms by only " << norm;
}

}  // namespace
}  // namespace trident::test
