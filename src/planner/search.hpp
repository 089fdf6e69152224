#pragma once
// The configuration search of `trident plan`: enumerate the layouts that divide the cluster and satisfy
// the deck's rules, estimate memory and step time for each, rank them.
#include <cstdint>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config.hpp"
#include "planner/cluster.hpp"
#include "planner/layout.hpp"
#include "planner/memory_model.hpp"
#include "planner/time_model.hpp"

namespace trident::planner {

// Parts of the layout fixed by the user; unset = searched. With tp, pp and dp all pinned the layout
// may use fewer devices than the cluster has (or more, on a cluster that allows oversubscription).
struct SearchPins {
  std::optional<int> tp, pp, dp;
  std::optional<int64_t> micro_batch;
  std::optional<int> zero;
  std::optional<Recompute> recompute;
  std::optional<Schedule> schedule;
  std::optional<int> virtual_stages;
  std::optional<bool> sequence_parallel;
  std::optional<int> nodes;  // overrides the cluster's node count

  bool mesh_pinned() const { return tp && pp && dp; }
  bool all_pinned() const {
    return mesh_pinned() && micro_batch && zero && recompute && schedule && virtual_stages && sequence_parallel;
  }
  bool admits(const Layout& l) const;  // the layout agrees with every pin
};

// Pins for exactly the deck's own layout.
SearchPins pins_of(const Config& cfg);

struct LayoutEstimate {
  Layout layout;
  Placement placement;
  MemoryEstimate memory;
  TimeBreakdown time;
  // The summary figures (also inside memory/time).
  bool fits = false;
  double memory_gb = 0;        // peak per device over the stages, GB (1e9 bytes)
  double capacity_gb = 0;
  double step_s = 0;
  double tokens_per_s = 0;
  double tflops_per_gpu = 0;   // model FLOPs (no recompute) per second per device, in TFLOP/s
  double mfu = 0;              // recompute FLOPs not counted
  double hfu = 0;              // recompute FLOPs counted
};

// Nodes the search plans for: pins.nodes, else the cluster's, else as many as the deck's own layout
// needs (tp*pp*dp of the deck over gpus_per_node, rounded up).
int resolve_nodes(const Config& cfg, const ClusterSpec& cluster, const SearchPins& pins);

// Estimates one layout (`nodes` as in place()). Throws trident::Error when the layout cannot be placed
// or the cluster has no peak for the deck's precision.
LayoutEstimate evaluate(const Config& cfg, const ClusterSpec& cluster, const Layout& l, int nodes = 0);

// Every layout the search considers, in enumeration order: tp*pp*dp equal to the cluster's devices
// (or the pinned mesh), micro_batch dividing global_batch/dp, schedule 1f1b/gpipe/interleaved (1f1b
// only when pp = 1; interleaved with v in 2..8 dividing layers/pp), zero 0..2 (0 only when dp = 1),
// recompute none/selective/full, sequence parallelism off/on (off when tp = 1); pins respected and
// layouts that break the deck's rules (layout_rule_violation) left out.
std::vector<Layout> enumerate_layouts(const Config& cfg, const ClusterSpec& cluster, const SearchPins& pins);

// Strict total order used for ranking: fitting layouts first, by predicted tokens/s (descending), then
// lower peak memory, then the layout's own key; layouts that do not fit after, by peak memory. The order
// of the input never matters.
bool ranks_before(const LayoutEstimate& a, const LayoutEstimate& b);
void rank(std::vector<LayoutEstimate>& estimates);

// Enumerates, evaluates and ranks (fitting ones first; those that do not fit follow, closest first).
std::vector<LayoutEstimate> search(const Config& cfg, const ClusterSpec& cluster, const SearchPins& pins);

// One row of `trident plan --json`: tp, pp, dp, micro_batch, virtual_stages, schedule, zero, recompute,
// sequence_parallel, fits, memory_gb, step_s, tokens_per_s, tflops_per_gpu, mfu, and more (hfu,
// micro_batches, bubble_fraction, nodes, memory and time breakdowns).
nlohmann::json to_json(const LayoutEstimate& e);

}  // namespace trident::planner
