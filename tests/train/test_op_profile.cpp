// runtime.op_profile (kernels/profiled_kernels.hpp, train/op_profile_report.hpp): a profiled
// `trident train` computes what the plain run computes, bit for bit; its table counts each operation as
// the model's structure says it runs (the tiny deck: 2 layers, 2 micro-batches of 2 x 16 tokens, hidden
// 32, so the qkv GEMM is 32 x 32 x 96); every rank's table is in the file; the log shows rank 0's; a path
// that cannot be written is refused before training.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "train/train_run_util.hpp"

namespace trident::test {
namespace {

std::map<std::string, double> calls_per_step(const nlohmann::json& rank) {
  std::map<std::string, double> calls;
  for (const auto& op : rank.at("ops")) calls[op.at("op").get<std::string>()] = op.at("calls_per_step").get<double>();
  return calls;
}

TEST(OpProfile, ProfiledRunEqualsThePlainRunAndCountsTheModelsOperations) {
  const TrainOutput plain = run_train(1, kTinyTextDeck, {});
  const TrainOutput profiled = run_train(1, kTinyTextDeck, {"runtime.op_profile=ops.json"});
  ASSERT_EQ(plain.rc, 0) << plain.out;
  ASSERT_EQ(profiled.rc, 0) << profiled.out;
  ASSERT_EQ(profiled.steps.size(), 4u) << profiled.out;
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(profiled.steps[i].at("loss"), plain.steps[i].at("loss")) << "step " << i + 1;
    EXPECT_EQ(profiled.steps[i].at("grad_norm"), plain.steps[i].at("grad_norm")) << "step " << i + 1;
  }
  EXPECT_NE(profiled.out.find("op profile of rank 0 over 3 step(s)"), std::string::npos) << profiled.out;
  std::ifstream f(profiled.dir + "/ops.json");
  ASSERT_TRUE(f.good()) << profiled.out;
  const nlohmann::json ranks = nlohmann::json::parse(f).at("ranks");
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_EQ(ranks[0].at("steps").get<int>(), 3) << "steps 2-4: the first warms up";
  const auto calls = calls_per_step(ranks[0]);
  // Per step: each layer op once per layer (2) and micro-batch (2); the LM head once per micro-batch (one
  // chunk of 32 rows); ln_1 of the first layer alone without a residual, every later norm fused with the
  // residual add that feeds it (ln_2 of each layer, ln_1 of the second, ln_f): 4 per micro-batch; every
  // norm's backward: 2 per layer and ln_f's, per micro-batch; one update.
  const std::map<std::string, double> expected = {
      {"matmul_forward 32x32x96", 4},     {"matmul_backward_overwrite 32x32x96", 4},
      {"matmul_forward 32x32x128", 4},    {"matmul_forward 32x128x32", 4},
      {"matmul_forward 32x32x32", 4},     {"matmul_forward 32x32x256", 2},
      {"attention_forward B2 T16 NH4 KVH4 HD8", 4}, {"attention_backward_overwrite B2 T16 NH4 KVH4 HD8", 4},
      {"gelu_forward 4096", 4},           {"layernorm_forward 32x32", 2},
      {"residual_layernorm_forward 32x32", 8}, {"layernorm_backward 32x32", 10},
      {"xent_loss_grad 32x256", 2}};
  for (const auto& [op, n] : expected) {
    ASSERT_TRUE(calls.count(op)) << op << " not in the profile:\n" << ranks[0].dump(1);
    EXPECT_EQ(calls.at(op), n) << op;
  }
  int adamw = 0;
  for (const auto& [op, n] : calls) adamw += op.rfind("adamw_update ", 0) == 0 ? int(n) : 0;
  EXPECT_EQ(adamw, 1) << "one multi-tensor update a step";
  for (const auto& op : ranks[0].at("ops")) EXPECT_GT(op.at("total_ms").get<double>(), 0.0) << op.dump();
  // FLOPs a call, from the shapes: a GEMM's 2 N IC OC per product (backward: dinp and dweight, also for
  // the first layer, whose input gradient feeds ln_1's backward; the tied LM head's too); attention's
  // causal half, 2 B NH T^2 HD forward (2 x 2 x 4 x 16^2 x 8) and twice that backward. No rate elsewhere.
  const std::map<std::string, double> flop_per_call = {
      {"matmul_forward 32x32x96", 2.0 * 32 * 32 * 96},    {"matmul_backward_overwrite 32x32x96", 4.0 * 32 * 32 * 96},
      {"matmul_forward 32x32x256", 2.0 * 32 * 32 * 256},  {"matmul_backward_overwrite 32x32x256", 4.0 * 32 * 32 * 256},
      {"attention_forward B2 T16 NH4 KVH4 HD8", 32768.0}, {"attention_backward_overwrite B2 T16 NH4 KVH4 HD8", 65536.0}};
  for (const auto& op : ranks[0].at("ops")) {
    const std::string name = op.at("op").get<std::string>();
    const auto it = flop_per_call.find(name);
    if (it != flop_per_call.end()) {
      EXPECT_EQ(op.at("flop_per_call").get<double>(), it->second) << name;
      EXPECT_GT(op.at("tflop_per_s").get<double>(), 0.0) << name;
    } else if (name.rfind("matmul_", 0) != 0 && name.rfind("attention_", 0) != 0) {
      EXPECT_FALSE(op.contains("tflop_per_s")) << name << " has no FLOPs counted";
    }
  }
  EXPECT_NE(profiled.out.find("TFLOP/s"), std::string::npos) << profiled.out;
}

TEST(OpProfile, EveryRanksTableIsInTheFile) {
  const TrainOutput run = run_train(2, kTinyTextDeck, {"mesh.dp=2", "runtime.op_profile=ops.json"});
  ASSERT_EQ(run.rc, 0) << run.out;
  std::ifstream f(run.dir + "/ops.json");
  ASSERT_TRUE(f.good()) << run.out;
  const nlohmann::json ranks = nlohmann::json::parse(f).at("ranks");
  ASSERT_EQ(ranks.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ranks[r].at("rank").get<int>(), r);
    // dp 2: each rank runs one micro-batch of the global batch of 4 per step.
    EXPECT_EQ(calls_per_step(ranks[r])["attention_forward B2 T16 NH4 KVH4 HD8"], 2.0) << ranks[r].dump(1);
  }
}

TEST(OpProfile, AnUnwritablePathIsRefusedBeforeTraining) {
  // Its directory would be the deck, a regular file (as root, a missing directory would be created).
  const TrainOutput run = run_train(1, kTinyTextDeck, {"runtime.op_profile=deck.toml/ops.json"});
  EXPECT_NE(run.rc, 0) << run.out;
  EXPECT_NE(run.out.find("[runtime] op_profile"), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("step 1/"), std::string::npos) << "trained anyway:\n" << run.out;
}

}  // namespace
}  // namespace trident::test
