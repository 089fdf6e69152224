// The configuration search: enumeration, pins, ranking, invariance to enumeration order, JSON rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "planner/search.hpp"
#include "planner_test_util.hpp"

namespace trident::planner {
namespace {

TEST(Search, EnumeratedLayoutsDivideTheClusterAndObeyTheRules) {
  const Config cfg = test::gpt3_175b();
  const ClusterSpec a100 = cluster_preset("a100-80g");
  const auto layouts = enumerate_layouts(cfg, a100, SearchPins{});
  ASSERT_GT(layouts.size(), 1000u);
  std::set<decltype(Layout{}.key())> seen;
  for (const Layout& l : layouts) {
    EXPECT_EQ(l.world(), 1024);
    EXPECT_EQ(layout_rule_violation(cfg, l), "") << describe(l);
    EXPECT_TRUE(seen.insert(l.key()).second) << "duplicate " << describe(l);
    if (l.tp == 1) { EXPECT_FALSE(l.sequence_parallel); }
    if (l.dp == 1) { EXPECT_EQ(l.zero, 0); }
    if (l.pp == 1) { EXPECT_EQ(l.schedule, Schedule::OneFOneB); }
    if (l.schedule == Schedule::Interleaved) { EXPECT_EQ(cfg.model.layers % (l.pp * l.virtual_stages), 0); }
  }
  // 96 heads: tp 64 does not divide them, so it never appears although 64 divides 1024.
  EXPECT_TRUE(std::none_of(layouts.begin(), layouts.end(), [](const Layout& l) { return l.tp == 64; }));
  // The deck's own layout is among them.
  Layout own = layout_of(cfg);
  EXPECT_NE(std::find(layouts.begin(), layouts.end(), own), layouts.end());
}

TEST(Search, PinsAreRespected) {
  const Config cfg = test::gpt3_175b();
  const ClusterSpec a100 = cluster_preset("a100-80g");
  SearchPins pins;
  pins.tp = 4;
  pins.zero = 1;
  pins.recompute = Recompute::Selective;
  pins.micro_batch = 2;
  const auto res = search(cfg, a100, pins);
  ASSERT_FALSE(res.empty());
  for (const auto& e : res) {
    EXPECT_EQ(e.layout.tp, 4);
    EXPECT_EQ(e.layout.zero, 1);
    EXPECT_EQ(e.layout.recompute, Recompute::Selective);
    EXPECT_EQ(e.layout.micro_batch, 2);
    EXPECT_TRUE(pins.admits(e.layout));
  }
  // --nodes changes the device count.
  SearchPins nodes;
  nodes.nodes = 16;
  nodes.tp = 8;
  for (const Layout& l : enumerate_layouts(cfg, a100, nodes)) EXPECT_EQ(l.world(), 128);
}

TEST(Search, AllPinnedEvaluatesOneLayout) {
  const Config cfg = test::gpt3_175b();
  const ClusterSpec a100 = cluster_preset("a100-80g");
  const SearchPins pins = pins_of(cfg);
  ASSERT_TRUE(pins.all_pinned());
  const auto res = search(cfg, a100, pins);
  ASSERT_EQ(res.size(), 1u);
  EXPECT_EQ(res[0].layout, layout_of(cfg));
  // A pinned mesh smaller than the cluster is evaluated on the devices it needs.
  SearchPins small = pins;
  small.pp = 8;
  small.dp = 2;
  const auto r2 = search(cfg, a100, small);
  ASSERT_EQ(r2.size(), 1u);
  EXPECT_EQ(r2[0].placement.devices_used, 128);
}

TEST(Search, RankingIsInvariantToEnumerationOrder) {
  const Config cfg = test::gpt3_175b();
  const ClusterSpec a100 = cluster_preset("a100-80g");
  SearchPins pins;
  pins.nodes = 16;  // 128 GPUs keeps the test quick
  std::vector<LayoutEstimate> base;
  for (const Layout& l : enumerate_layouts(cfg, a100, pins)) base.push_back(evaluate(cfg, a100, l, 16));
  ASSERT_GT(base.size(), 100u);
  std::vector<LayoutEstimate> ref = base;
  rank(ref);
  // Also equal to the search's own answer.
  const auto searched = search(cfg, a100, pins);
  ASSERT_EQ(searched.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(searched[i].layout, ref[i].layout) << i;
  for (unsigned seed : {1u, 2u, 3u, 4u, 5u}) {
    std::vector<LayoutEstimate> shuffled = base;
    std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(seed));
    rank(shuffled);
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(shuffled[i].layout, ref[i].layout) << "seed " << seed << " #" << i;
  }
  std::vector<LayoutEstimate> reversed(base.rbegin(), base.rend());
  rank(reversed);
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(reversed[i].layout, ref[i].layout) << i;
}

TEST(Search, RankedFitsFirstThenByThroughput) {
  const Config cfg = test::gpt3_175b();
  const ClusterSpec a100 = cluster_preset("a100-40g");
  SearchPins pins;
  pins.nodes = 16;
  const auto res = search(cfg, a100, pins);
  ASSERT_FALSE(res.empty());
  bool seen_unfit = false;
  for (size_t i = 0; i < res.size(); ++i) {
    if (!res[i].fits) seen_unfit = true;
    if (seen_unfit) { EXPECT_FALSE(res[i].fits) << "a fitting layout after a non-fitting one at " << i; }
    if (i > 0 && res[i].fits) { EXPECT_LE(res[i].tokens_per_s, res[i - 1].tokens_per_s); }
    if (i > 0 && !res[i].fits && !res[i - 1].fits) { EXPECT_GE(res[i].memory_gb, res[i - 1].memory_gb); }
  }
  EXPECT_TRUE(seen_unfit);   // 175B on 128 A100-40GB: many layouts do not fit...
  EXPECT_TRUE(res[0].fits);  // ...but some do.
  // The planner's reasoning matches the seeds': the best layouts keep TP inside a node.
  EXPECT_LE(res[0].layout.tp, 8);
}

TEST(Search, JsonRowHasTheContractKeys) {
  const Config cfg = test::gpt3_175b();
  const LayoutEstimate e = evaluate(cfg, cluster_preset("a100-80g"), layout_of(cfg));
  const nlohmann::json j = to_json(e);
  for (const char* k : {"tp", "pp", "dp", "micro_batch", "virtual_stages", "schedule", "zero", "recompute",
                        "sequence_parallel", "fits", "memory_gb", "step_s", "tokens_per_s", "tflops_per_gpu", "mfu"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["tp"], 8);
  EXPECT_EQ(j["pp"], 16);
  EXPECT_EQ(j["dp"], 8);
  EXPECT_EQ(j["schedule"], "1f1b");
  EXPECT_EQ(j["recompute"], "none");
  EXPECT_EQ(j["sequence_parallel"], false);
  EXPECT_TRUE(j["fits"].is_boolean());
  EXPECT_DOUBLE_EQ(j["memory_gb"].get<double>(), e.memory_gb);
  EXPECT_DOUBLE_EQ(j["mfu"].get<double>(), e.mfu);
  EXPECT_EQ(j["mfu_counts_recompute"], false);
  EXPECT_TRUE(j["memory"].contains("parameters_gb"));
  EXPECT_TRUE(j["time"].contains("pp_bubble_s"));
}

TEST(Search, NoLayoutWhenPinsBreakRules) {
  const Config cfg = test::gpt3_175b();
  SearchPins pins;
  pins.tp = 64;  // 96 heads are not divisible by 64
  EXPECT_TRUE(search(cfg, cluster_preset("a100-80g"), pins).empty());
}

}  // namespace
}  // namespace trident::planner
