#include "planner/search.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace trident::planner {
namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i * i <= n; ++i) {
    if (n % i != 0) continue;
    d.push_back(i);
    if (i != n / i) d.push_back(n / i);
  }
  std::sort(d.begin(), d.end());
  return d;
}

template <class T, class U>
std::vector<T> pinned_or(const std::optional<U>& pin, std::vector<T> all) {
  if (pin) return {T(*pin)};
  return all;
}

}  // namespace

bool SearchPins::admits(const Layout& l) const {
  return (!tp || *tp == l.tp) && (!pp || *pp == l.pp) && (!dp || *dp == l.dp) &&
         (!micro_batch || *micro_batch == l.micro_batch) && (!zero || *zero == l.zero) &&
         (!recompute || *recompute == l.recompute) && (!schedule || *schedule == l.schedule) &&
         (!virtual_stages || *virtual_stages == l.virtual_stages) &&
         (!sequence_parallel || *sequence_parallel == l.sequence_parallel);
}

SearchPins pins_of(const Config& cfg) {
  const Layout l = layout_of(cfg);
  SearchPins p;
  p.tp = l.tp;
  p.pp = l.pp;
  p.dp = l.dp;
  p.micro_batch = l.micro_batch;
  p.zero = l.zero;
  p.recompute = l.recompute;
  p.schedule = l.schedule;
  p.virtual_stages = l.virtual_stages;
  p.sequence_parallel = l.sequence_parallel;
  return p;
}

int resolve_nodes(const Config& cfg, const ClusterSpec& cluster, const SearchPins& pins) {
  if (pins.nodes) return *pins.nodes;
  if (cluster.nodes > 0) return cluster.nodes;
  const int gpn = std::max(1, cluster.gpus_per_node);
  const int world = pins.mesh_pinned() ? *pins.tp * *pins.pp * *pins.dp : cfg.mesh.world_size();
  return (world + gpn - 1) / gpn;
}

LayoutEstimate evaluate(const Config& cfg, const ClusterSpec& cluster, const Layout& l, int nodes) {
  LayoutEstimate e;
  e.layout = l;
  e.placement = place(cluster, l, cfg.mesh.order, nodes);
  e.memory = estimate_memory(cfg, cluster, l, e.placement);
  e.time = estimate_time(cfg, cluster, l, e.placement, e.memory);
  e.fits = e.memory.fits;
  e.memory_gb = e.memory.peak_bytes() / kGB;
  e.capacity_gb = e.memory.capacity / kGB;
  e.step_s = e.time.step;
  e.tokens_per_s = e.time.tokens_per_s;
  e.tflops_per_gpu = e.time.tflops_per_gpu;
  e.mfu = e.time.mfu;
  e.hfu = e.time.hfu;
  return e;
}

std::vector<Layout> enumerate_layouts(const Config& cfg, const ClusterSpec& cluster, const SearchPins& pins) {
  std::vector<Layout> out;
  const int64_t devices = pins.mesh_pinned() ? int64_t(*pins.tp) * *pins.pp * *pins.dp
                                             : int64_t(resolve_nodes(cfg, cluster, pins)) * cluster.gpus_per_node;
  const int64_t gb = cfg.train.global_batch;
  const int64_t L = cfg.model.layers;
  for (int64_t tp : pinned_or(pins.tp, divisors(devices))) {
    if (devices % tp != 0) continue;
    for (int64_t pp : pinned_or(pins.pp, divisors(devices / tp))) {
      if ((devices / tp) % pp != 0) continue;
      const int64_t dp = devices / (tp * pp);
      if (pins.dp && *pins.dp != dp) continue;
      if (gb % dp != 0) continue;
      for (int64_t mbatch : pinned_or(pins.micro_batch, divisors(gb / dp))) {
        std::vector<Schedule> schedules = pp == 1 ? std::vector<Schedule>{Schedule::OneFOneB}
                                                  : std::vector<Schedule>{Schedule::OneFOneB, Schedule::GPipe,
                                                                          Schedule::Interleaved};
        for (Schedule sched : pinned_or(pins.schedule, schedules)) {
          std::vector<int64_t> vs{1};
          if (sched == Schedule::Interleaved) {
            vs.clear();
            for (int64_t v = 2; v <= 8; ++v)
              if (L % (pp * v) == 0) vs.push_back(v);
          }
          for (int64_t v : pinned_or(pins.virtual_stages, vs)) {
            for (int64_t zero : pinned_or(pins.zero, dp == 1 ? std::vector<int64_t>{0} : std::vector<int64_t>{0, 1, 2})) {
              for (Recompute rc : pinned_or(pins.recompute, std::vector<Recompute>{Recompute::None, Recompute::Selective,
                                                                                   Recompute::Full})) {
                for (bool sp : pinned_or(pins.sequence_parallel,
                                         tp == 1 ? std::vector<bool>{false} : std::vector<bool>{false, true})) {
                  Layout l;
                  l.tp = int(tp);
                  l.pp = int(pp);
                  l.dp = int(dp);
                  l.micro_batch = mbatch;
                  l.schedule = sched;
                  l.virtual_stages = int(v);
                  l.zero = int(zero);
                  l.recompute = rc;
                  l.sequence_parallel = sp;
                  if (layout_rule_violation(cfg, l).empty()) out.push_back(l);
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

bool ranks_before(const LayoutEstimate& a, const LayoutEstimate& b) {
  if (a.fits != b.fits) return a.fits;
  const double ma = a.memory.peak_bytes(), mb = b.memory.peak_bytes();
  if (a.fits) {
    if (a.tokens_per_s != b.tokens_per_s) return a.tokens_per_s > b.tokens_per_s;
    if (ma != mb) return ma < mb;
  } else {
    if (ma != mb) return ma < mb;
    if (a.tokens_per_s != b.tokens_per_s) return a.tokens_per_s > b.tokens_per_s;
  }
  return a.layout < b.layout;
}

void rank(std::vector<LayoutEstimate>& estimates) { std::sort(estimates.begin(), estimates.end(), ranks_before); }

std::vector<LayoutEstimate> search(const Config& cfg, const ClusterSpec& cluster, const SearchPins& pins) {
  const int nodes = pins.mesh_pinned() ? (pins.nodes ? *pins.nodes : 0) : resolve_nodes(cfg, cluster, pins);
  std::vector<LayoutEstimate> out;
  for (const Layout& l : enumerate_layouts(cfg, cluster, pins)) out.push_back(evaluate(cfg, cluster, l, nodes));
  rank(out);
  return out;
}

nlohmann::json to_json(const LayoutEstimate& e) {
  const auto& l = e.layout;
  const StageMemory& pk = e.memory.peak();
  const TimeBreakdown& t = e.time;
  nlohmann::json j;
  j["tp"] = l.tp;
  j["pp"] = l.pp;
  j["dp"] = l.dp;
  j["micro_batch"] = l.micro_batch;
  j["virtual_stages"] = l.virtual_stages;
  j["schedule"] = to_string(l.schedule);
  j["zero"] = l.zero;
  j["recompute"] = to_string(l.recompute);
  j["sequence_parallel"] = l.sequence_parallel;
  j["fits"] = e.fits;
  j["memory_gb"] = e.memory_gb;
  j["capacity_gb"] = e.capacity_gb;
  j["step_s"] = e.step_s;
  j["tokens_per_s"] = e.tokens_per_s;
  j["tflops_per_gpu"] = e.tflops_per_gpu;
  j["mfu"] = e.mfu;
  j["hfu"] = e.hfu;
  j["mfu_counts_recompute"] = false;
  j["micro_batches"] = t.micro_batches;
  j["bubble_fraction"] = t.bubble_fraction;
  j["nodes"] = e.placement.nodes;
  j["ranks_per_node"] = e.placement.ranks_per_node;
  j["memory"] = {
      {"peak_stage", pk.stage},
      {"layers_on_peak_stage", pk.layers},
      {"micro_batches_in_flight", pk.in_flight},
      {"parameters_gb", pk.states.parameters / kGB},
      {"gradients_gb", pk.states.gradients / kGB},
      {"master_weights_gb", pk.states.master_weights / kGB},
      {"optimizer_moments_gb", pk.states.optimizer_moments / kGB},
      {"activations_gb", pk.activations / kGB},
      {"edge_activations_gb", pk.edge_activations / kGB},
      {"recompute_working_gb", pk.recompute_working / kGB},
      {"comm_buffers_gb", pk.comm_buffers / kGB},
      {"gemm_copies_gb", pk.gemm_copies / kGB},
      {"reserved_gb", pk.reserved / kGB},
  };
  j["time"] = {
      {"critical_stage", t.critical_stage},
      {"compute_forward_s", t.compute_forward},
      {"compute_backward_s", t.compute_backward},
      {"compute_recompute_s", t.compute_recompute},
      {"elementwise_s", t.elementwise},
      {"tp_comm_s", t.tp_comm},
      {"pp_p2p_s", t.pp_p2p},
      {"pp_bubble_s", t.pp_bubble},
      {"dp_comm_s", t.dp_comm},
      {"dp_comm_exposed_s", t.dp_comm_exposed},
      {"dp_in_clock_s", t.dp_in_clock},
      {"zero_allgather_s", t.zero_allgather},
      {"embedding_sync_s", t.embedding_sync},
      {"optimizer_s", t.optimizer},
      {"after_flush_s", t.after_flush},
  };
  return j;
}

}  // namespace trident::planner
