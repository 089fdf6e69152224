// Pipeline parallelism: the schedules' definitions, and equivalence with the serial run
// (registered at 1, 2 and 4 ranks; the pipeline is the whole world, or 2 x 2 with TP at 4 ranks).
// Tolerances (fp32): losses within 1e-5 relative, gradients within 1e-4 relative L2 after step 1.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <chrono>
#include <cstring>

#include "common/test_support.hpp"
#include "kernels.hpp"
#include "parallel/parallel_test_util.hpp"
#include "pipeline/partition.hpp"
#include "pipeline/schedule.hpp"

namespace trident::test {
namespace {

// ---- schedules: written out by hand from their definitions ----

TEST(PipelineSchedule, GPipeRunsAllForwardsThenAllBackwards) {
  EXPECT_EQ(describe(build_schedule(Schedule::GPipe, 4, 1, 1, 3)), "F0.0 F0.1 F0.2 B0.0 B0.1 B0.2");
}

TEST(PipelineSchedule, OneFOneBWarmsUpThenAlternates) {
  // pp 4, m 6: stage s warms up with pp - s - 1 forwards.
  EXPECT_EQ(describe(build_schedule(Schedule::OneFOneB, 4, 0, 1, 6)),
            "F0.0 F0.1 F0.2 F0.3 B0.0 F0.4 B0.1 F0.5 B0.2 B0.3 B0.4 B0.5");
  EXPECT_EQ(describe(build_schedule(Schedule::OneFOneB, 4, 2, 1, 6)),
            "F0.0 F0.1 B0.0 F0.2 B0.1 F0.3 B0.2 F0.4 B0.3 F0.5 B0.4 B0.5");
  EXPECT_EQ(describe(build_schedule(Schedule::OneFOneB, 4, 3, 1, 6)),
            "F0.0 B0.0 F0.1 B0.1 F0.2 B0.2 F0.3 B0.3 F0.4 B0.4 F0.5 B0.5");
}

TEST(PipelineSchedule, InterleavedFollowsMegatronOrder) {
  // pp 2, v 2, m 4: stage 0 warms up with (pp-1)*2 + (v-1)*pp = 4 forwards over chunks 0,0,1,1.
  EXPECT_EQ(describe(build_schedule(Schedule::Interleaved, 2, 0, 2, 4)),
            "F0.0 F0.1 F1.0 F1.1 F0.2 B1.0 F0.3 B1.1 F1.2 B0.0 F1.3 B0.1 B1.2 B1.3 B0.2 B0.3");
  // m == pp: every forward first.
  EXPECT_EQ(describe(build_schedule(Schedule::Interleaved, 2, 1, 2, 2)), "F0.0 F0.1 F1.0 F1.1 B1.0 B1.1 B0.0 B0.1");
}

TEST(PipelineSchedule, PeakMicroBatchesInFlight) {
  for (int pp : {2, 4})
    for (int m : {4, 8, 16})
      for (int stage = 0; stage < pp; ++stage) {
        EXPECT_EQ(peak_in_flight(build_schedule(Schedule::GPipe, pp, stage, 1, m)), m);
        EXPECT_EQ(peak_in_flight(build_schedule(Schedule::OneFOneB, pp, stage, 1, m)), pp - stage);
      }
}

TEST(PipelineSchedule, EveryMicroBatchRunsForwardThenBackwardOnce) {
  for (Schedule sch : {Schedule::GPipe, Schedule::OneFOneB, Schedule::Interleaved})
    for (int stage = 0; stage < 4; ++stage) {
      const int v = sch == Schedule::Interleaved ? 2 : 1;
      const auto ops = build_schedule(sch, 4, stage, v, 8);
      ASSERT_EQ(ops.size(), size_t(2 * 8 * v));
      for (int c = 0; c < v; ++c)
        for (int mb = 0; mb < 8; ++mb) {
          int f = -1, b = -1, nf = 0, nb = 0;
          for (size_t i = 0; i < ops.size(); ++i)
            if (ops[i].chunk == c && ops[i].micro_batch == mb) (ops[i].forward ? (f = int(i), ++nf) : (b = int(i), ++nb));
          EXPECT_EQ(nf, 1);
          EXPECT_EQ(nb, 1);
          EXPECT_LT(f, b) << "chunk " << c << " micro-batch " << mb;
        }
    }
}

TEST(PipelinePartition, BalancesCostAndHonoursOverrides) {
  Config cfg = small_deck(1009, {"model.layers=8", "mesh.pp=2"});
  // The LM head (2*C*V = 2*64*1009 per token) outweighs one layer (24*64^2 + 4*16*64), so the last
  // stage gets fewer layers.
  const auto sizes = partition_layers(cfg);
  ASSERT_EQ(sizes.size(), 2u);
  EXPECT_EQ(sizes[0] + sizes[1], 8);
  EXPECT_GT(sizes[0], sizes[1]);
  cfg.mesh.layers_per_stage = {3, 5};
  EXPECT_EQ(partition_layers(cfg), (std::vector<int64_t>{3, 5}));
  const ChunkSpec last = chunk_spec({3, 5}, 1);
  EXPECT_EQ(last.layer_begin, 3);
  EXPECT_EQ(last.layer_end, 8);
  EXPECT_TRUE(last.head);
  EXPECT_FALSE(last.embedding);
}

// ---- equivalence with the serial run ----

struct PipeCase {
  const char* name;
  int tp;
  const char* schedule;
  int v;
};

std::vector<std::string> pipe_overrides(const PipeCase& c, int pp) {
  return {fmt::format("mesh.pp={}", pp), fmt::format("mesh.tp={}", c.tp), fmt::format("mesh.schedule={}", c.schedule),
          fmt::format("mesh.virtual_stages={}", c.v), "model.layers=8", "train.global_batch=16",
          "train.recompute=full", "model.vocab_pad_to=8"};
}

class PipelineEquivalence : public ::testing::TestWithParam<PipeCase> {};

TEST_P(PipelineEquivalence, LossesAndGradientsMatchSerial) {
  const PipeCase c = GetParam();
  const int pp = world_size() / c.tp;
  if (pp < 1 || world_size() % c.tp != 0) TRIDENT_SKIP_NOT_APPLICABLE("layout does not fit " << world_size() << " ranks");
  if (c.v > 1 && pp < 2) TRIDENT_SKIP_NOT_APPLICABLE("interleaving needs pp >= 2");
  auto overrides = pipe_overrides(c, pp);
  const Config cfg = small_deck(1009, overrides);
  const RunResult serial = run_steps(small_deck(1009, {"model.layers=8", "train.global_batch=16",
                                                        "train.recompute=full", "model.vocab_pad_to=8"}),
                                     nullptr, 5);
  ParallelMesh mesh(MPI_COMM_WORLD, cfg.mesh, cfg.runtime.mpi_wait);
  const RunResult par = run_steps(cfg, &mesh, 5);
  for (size_t s = 0; s < serial.losses.size(); ++s) {
    EXPECT_NEAR(par.losses[s], serial.losses[s], 1e-5 * serial.losses[s]) << "step " << s + 1;
    EXPECT_NEAR(par.grad_norms[s], serial.grad_norms[s], 1e-4 * serial.grad_norms[s]) << "step " << s + 1;
  }
  // This rank holds some of the tensors; each must match the serial model's.
  ASSERT_FALSE(par.step1_grads.empty());
  for (const auto& [name, grad] : par.step1_grads)
    EXPECT_LE(relative_l2(grad, serial.step1_grads.at(name)), 1e-4) << name << " on pipeline rank " << mesh.coord().pp;
}

INSTANTIATE_TEST_SUITE_P(Schedules, PipelineEquivalence,
                         ::testing::Values(PipeCase{"gpipe", 1, "gpipe", 1}, PipeCase{"onefoneb", 1, "1f1b", 1},
                                           PipeCase{"interleaved", 1, "interleaved", 2},
                                           PipeCase{"tp2_onefoneb", 2, "1f1b", 1}),
                         [](const auto& info) { return std::string(info.param.name); });

// The first and last stage each hold the tied embedding; their copies must stay bit-identical.
TEST(PipelineParallel, TiedEmbeddingCopiesStayIdentical) {
  if (world_size() < 2) TRIDENT_SKIP_NOT_APPLICABLE("needs two stages");
  const Config cfg = small_deck(1009, {fmt::format("mesh.pp={}", world_size()), "model.layers=8",
                                       "train.global_batch=16", "model.vocab_pad_to=8"});
  ParallelMesh mesh(MPI_COMM_WORLD, cfg.mesh, cfg.runtime.mpi_wait);
  auto kernels = make_kokkos_kernels();
  Trainer trainer(cfg, *kernels, &mesh);
  for (int64_t s = 1; s <= 3; ++s) trainer.train_step(s);
  Group* emb = mesh.embedding();
  if (!emb) return;  // middle stages hold no embedding
  const auto& layout = trainer.model().layout();
  const int64_t n = layout.find("transformer.wte.weight").numel;
  std::vector<float> mine(n), both(2 * n);
  kernels->copy_to_host(mine.data(), trainer.model().params() + layout.wte(), n);
  emb->all_gather(mine.data(), both.data(), n);
  EXPECT_EQ(0, std::memcmp(both.data(), both.data() + n, sizeof(float) * n));
}

// A stage that fails in the middle of a step ends the whole job with one message, promptly.
TEST(PipelineParallel, FailingStageEndsTheJob) {
  if (world_rank() != 0) return;
  const std::string dir = make_temp_dir("trident-pp-fail");
  const Config cfg = small_deck(1009, {});
  write_file(dir + "/deck.toml", cfg.resolved_toml);
  std::string out;
  const auto start = std::chrono::steady_clock::now();
  const int rc = run_command(fmt::format("cd {} && {} TRIDENT_INJECT_FAULT=pipeline-stage:1 {} -n 2 {} train deck.toml "
                                         "--set mesh.pp=2 --set runtime.mpi_wait=poll",
                                         dir, without_parent_mpi_env(), TRIDENT_MPIEXEC, trident_binary()),
                             &out);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(rc, 0) << out;
  EXPECT_LT(seconds, 60.0);
  const std::string message = "pipeline stage 1 failed in the backward of micro-batch 0";
  const size_t first = out.find(message);
  ASSERT_NE(first, std::string::npos) << out;
  EXPECT_EQ(out.find(message, first + 1), std::string::npos) << "the message appears more than once:\n" << out;
}

}  // namespace
}  // namespace trident::test
