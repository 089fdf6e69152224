// Pipeline parallelism: the schedules' definitions, and equivalence with the serial run
// (registered at 2 and 4 ranks; the pipeline is the whole world, or 2 x 2 with TP at 4 ranks).
// Tolerances: see kPpTolerance.
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

// A pipeline cuts the model between layers: each stage computes exactly the serial run's arithmetic
// for its layers. A pure pipeline differs from the serial run only where sums are split: the tied
// embedding's gradient (two stages' parts added: one rounding, ~eps = 6e-8 relative) and the global
// gradient norm (per-stage squared sums added in double). With an untied head nothing is split and
// the runs were measured bitwise equal. With TP inside, TP's reordered sums add to that (see
// test_tensor_parallel.cpp; AdamW amplifies the rounding in later steps). Measured over this matrix
// at 2 and 4 ranks (TRIDENT_TEST_REPORT_ERRORS=1), tp 1 / tp 2: losses 1.4e-8 / 2.9e-7, step-1
// gradients 6.7e-8 / 5.9e-7, step 2-3 gradients 5.2e-7 / 2.1e-5, parameters after 5 steps
// 1.2e-7 / 8.8e-6. Bounds: about 10 times those.
const Tolerance kPpTolerance{/*loss=*/1e-7, /*gradient=*/1e-6, /*later_gradient=*/5e-6, /*parameter=*/1e-6f};
const Tolerance kPpWithTpTolerance{/*loss=*/3e-6, /*gradient=*/5e-6, /*later_gradient=*/2e-4, /*parameter=*/1e-4f};

struct PipeCase {
  const char* name;
  int tp;
  const char* schedule;
  int v;
  const char* recompute = "full";
  bool tied = true;
  int64_t vocab = 1009;
  const char* order = "tp-dp-pp";  // the default
  bool uneven_stages = false;      // mesh.layers_per_stage: the first chunk takes all but one layer per other chunk
};

// The model and training settings, the same for the serial run.
std::vector<std::string> model_overrides(const PipeCase& c) {
  return {"model.layers=8", "train.global_batch=16", fmt::format("train.recompute={}", c.recompute),
          fmt::format("model.tie_embeddings={}", c.tied),
          fmt::format("model.vocab_pad_to={}", c.vocab == 50257 ? 1 : 8)};
}

std::vector<std::string> pipe_overrides(const PipeCase& c, int pp) {
  auto o = model_overrides(c);
  o.insert(o.end(), {fmt::format("mesh.pp={}", pp), fmt::format("mesh.tp={}", c.tp),
                     fmt::format("mesh.schedule={}", c.schedule), fmt::format("mesh.virtual_stages={}", c.v),
                     fmt::format("mesh.order={}", c.order)});
  if (c.uneven_stages) {
    const int chunks = pp * c.v;
    std::vector<int64_t> sizes(size_t(chunks), 1);
    sizes[0] = 8 - (chunks - 1);
    o.push_back(fmt::format("mesh.layers_per_stage=[{}]", fmt::join(sizes, ",")));
  }
  return o;
}

class PipelineEquivalence : public ::testing::TestWithParam<PipeCase> {};

TEST_P(PipelineEquivalence, LossesGradientsAndParametersMatchSerial) {
  const PipeCase c = GetParam();
  const int pp = world_size() / c.tp;
  ASSERT_EQ(world_size() % c.tp, 0) << "register this test at rank counts that tp divides";
  ASSERT_TRUE(c.v == 1 || pp >= 2) << "interleaving needs pp >= 2: register this test at rank counts >= 2 * tp";
  const Config cfg = small_deck(c.vocab, pipe_overrides(c, pp));
  const Config serial_deck = small_deck(c.vocab, model_overrides(c));
  const RunResult& serial = serial_run(serial_deck, 5);
  ParallelMesh mesh(MPI_COMM_WORLD, cfg.mesh, cfg.runtime.mpi_wait);
  const RunResult par = run_steps(cfg, &mesh, 5);
  expect_matches_serial(par, serial, c.tp == 1 ? kPpTolerance : kPpWithTpTolerance);
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, PipelineEquivalence,
    ::testing::Values(PipeCase{"gpipe", 1, "gpipe", 1}, PipeCase{"onefoneb", 1, "1f1b", 1},
                      PipeCase{"interleaved", 1, "interleaved", 2}, PipeCase{"tp2_onefoneb", 2, "1f1b", 1},
                      PipeCase{"selective_onefoneb", 1, "1f1b", 1, "selective"},
                      PipeCase{"untied_gpipe", 1, "gpipe", 1, "none", false},
                      PipeCase{"untied_interleaved", 1, "interleaved", 2, "selective", false},
                      PipeCase{"vocab50257_onefoneb", 1, "1f1b", 1, "none", true, 50257},
                      PipeCase{"tp2_pp_fastest_uneven_stages", 2, "1f1b", 1, "full", true, 1009, "pp-tp-dp", true},
                      PipeCase{"uneven_stages_gpipe", 1, "gpipe", 1, "selective", true, 1009, "tp-dp-pp", true}),
    [](const auto& info) { return std::string(info.param.name); });

// The first and last stage each hold the tied embedding; their copies must stay bit-identical.
TEST(PipelineParallel, TiedEmbeddingCopiesStayIdentical) {
  ASSERT_GE(world_size(), 2) << "needs two stages: register this test at 2 ranks or more";
  const Config cfg = small_deck(1009, {fmt::format("mesh.pp={}", world_size()), "model.layers=8",
                                       "train.global_batch=16", "model.vocab_pad_to=8"});
  ParallelMesh mesh(MPI_COMM_WORLD, cfg.mesh, cfg.runtime.mpi_wait);
  connect(mesh, cfg);
  Kernels& kernels = test_kernels();
  Trainer trainer(cfg, kernels, &mesh);
  for (int64_t s = 1; s <= 3; ++s) trainer.train_step(s);
  Group* emb = mesh.embedding();
  if (!emb) return;  // middle stages hold no embedding
  const auto& layout = trainer.model().layout();
  const int64_t n = layout.find("transformer.wte.weight").numel;
  std::vector<float> mine(n), both(2 * n);
  kernels.copy_to_host(mine.data(), trainer.model().params() + layout.wte(), n);
  emb->all_gather_host(mine.data(), both.data(), n);
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
                                         dir, without_parent_mpi_env(), local_mpiexec(), trident_binary()),
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
