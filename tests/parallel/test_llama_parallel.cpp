// Llama-shaped models (RMSNorm, RoPE, SwiGLU, grouped-query attention, no biases, untied head) on every
// parallel layout against the serial run of the same deck, as the GPT-2 suites do (parallel_test_util.hpp).
// Registered at 2, 4 and 8 ranks; each rank count runs the layouts of its size:
//   2: tp 2 with kv_heads 2 (split), tp 2 with kv_heads 1 (replicated on both ranks) + SP + selective
//      recompute, tp 2 with biases and a tied head, pp 2 (1F1B, GPipe with full recompute, a tied head
//      shared by the two stages), dp 2 under
//      ZeRO 1 and ZeRO 3
//   4: tp 4 with kv_heads 2 (each replicated on 2 ranks) + SP, tp 2 x pp 2 (kv_heads 1), pp 2 x dp 2
//      interleaved, dp 4 ZeRO 2
//   8: tp 2 x pp 2 x dp 2 (ZeRO 1, kv_heads 1), dp 2 x tp 4 ZeRO 3
// Tolerances: the GPT-2 suites' 3D bounds (test_data_parallel.cpp, k3dTolerance): TP, PP and DP only
// reorder sums, so the step-1 losses and gradients agree to float32 rounding of sums over the batch;
// later steps and parameters drift by AdamW's amplification of rounding near zero gradients. RoPE and
// RMSNorm add no reduction across ranks (both act on a rank's own heads and rows), and the k/v gradients
// of replicated heads are sums of the replicas' parts, so the GPT-2 bounds apply unchanged.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "common/test_support.hpp"
#include "parallel/parallel_test_util.hpp"

namespace trident::test {
namespace {

const Tolerance kLlamaTolerance{/*loss=*/6.5e-6, /*gradient=*/6.5e-6, /*later_gradient=*/4.5e-4, /*parameter=*/5e-5f};

// The model and training settings every layout shares with its serial run (hidden 64, 4 heads of 16).
const std::vector<std::string> kLlama = {"model.architecture=llama", "model.layers=4",  "model.ffn_hidden=96",
                                         "model.rope_theta=500",     "model.norm_eps=1e-4", "model.tie_embeddings=false",
                                         "train.global_batch=16",    "train.micro_batch=2", "model.vocab_pad_to=8"};

std::vector<NamedLayout> layouts() {
  return {
      {"tp2_kv2", 2, {"model.kv_heads=2", "mesh.tp=2"}},
      {"tp2_kv1_replicated_sp_selective", 2,
       {"model.kv_heads=1", "mesh.tp=2", "mesh.sequence_parallel=true", "train.recompute=selective"}},
      {"tp2_bias_tied", 2, {"model.kv_heads=2", "model.bias=true", "model.tie_embeddings=true", "mesh.tp=2"}},
      {"pp2_1f1b", 2, {"model.kv_heads=2", "mesh.pp=2"}},
      {"pp2_gpipe_full", 2, {"model.kv_heads=1", "mesh.pp=2", "mesh.schedule=gpipe", "train.recompute=full"}},
      {"pp2_tied", 2, {"model.kv_heads=2", "model.tie_embeddings=true", "mesh.pp=2"}},
      {"dp2_zero1", 2, {"model.kv_heads=2", "mesh.dp=2", "mesh.zero=1"}},
      {"dp2_zero3", 2, {"model.kv_heads=2", "mesh.dp=2", "mesh.zero=3"}},
      {"tp4_kv2_replicated_sp", 4, {"model.kv_heads=2", "mesh.tp=4", "mesh.sequence_parallel=true"}},
      {"tp2_pp2_kv1", 4, {"model.kv_heads=1", "mesh.tp=2", "mesh.pp=2"}},
      {"pp2_dp2_interleaved", 4,
       {"model.kv_heads=2", "mesh.pp=2", "mesh.dp=2", "mesh.schedule=interleaved", "mesh.virtual_stages=2"}},
      {"dp4_zero2", 4, {"model.kv_heads=2", "mesh.dp=4", "mesh.zero=2"}},
      {"tp2_pp2_dp2_zero1", 8, {"model.kv_heads=1", "mesh.tp=2", "mesh.pp=2", "mesh.dp=2", "mesh.zero=1"}},
      {"tp4_dp2_zero3", 8, {"model.kv_heads=2", "mesh.tp=4", "mesh.dp=2", "mesh.zero=3"}},
  };
}

TEST(LlamaParallel, EveryLayoutOfThisRankCountMatchesSerial) {
  const int run = expect_layouts_match_serial(layouts(), kLlama, kLlamaTolerance);
  EXPECT_GT(run, 0) << "no Llama layout has " << world_size() << " ranks: register this test at 2, 4 or 8";
}

}  // namespace
}  // namespace trident::test
