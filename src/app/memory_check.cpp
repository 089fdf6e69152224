#include "app/memory_check.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "planner/memory_model.hpp"
#include "planner/plan_command.hpp"

namespace trident {
namespace {

std::string gb(double bytes) { return fmt::format("{:.2f} GB", bytes / 1e9); }

// The first number in a file ("max" and unreadable files give nothing).
std::optional<double> read_number(const std::string& path) {
  std::ifstream f(path);
  double v = 0;
  if (f >> v) return v;
  return std::nullopt;
}

std::optional<double> cgroup_headroom() {
  for (const auto& [limit, usage] : {std::pair{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
                                     std::pair{"/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                               "/sys/fs/cgroup/memory/memory.usage_in_bytes"}}) {
    const auto l = read_number(limit), u = read_number(usage);
    // cgroup v1 reports "no limit" as a huge number (about 2^63).
    if (l && u && *l < 1e18) return std::max(0.0, *l - *u);
  }
  return std::nullopt;
}

struct Alternative {
  std::string change;  // as a --set argument
  Config cfg;
};

// The changes a user can make without more hardware, each with its own estimate.
std::vector<Alternative> alternatives(const Config& cfg) {
  std::vector<Alternative> alts;
  if (cfg.train.recompute != Recompute::Full) {
    Config c = cfg;
    c.train.recompute = Recompute::Full;
    alts.push_back({"--set train.recompute=full", c});
  }
  if (cfg.mesh.dp > 1 && cfg.mesh.zero < 2) {
    Config c = cfg;
    c.mesh.zero = 2;
    alts.push_back({"--set mesh.zero=2", c});
  }
  if (cfg.train.micro_batch > 1) {
    Config c = cfg;
    c.train.micro_batch = 1;
    alts.push_back({"--set train.micro_batch=1", c});
  }
  return alts;
}

}  // namespace

double estimated_rank_bytes(const Config& cfg) {
  using namespace planner;
  const ClusterSpec cluster = load_cluster(default_cluster_for(cfg));
  const Layout l = layout_of(cfg);
  const MemoryEstimate mem = estimate_memory(cfg, cluster, l, place(cluster, l, cfg.mesh.order));
  const StageMemory& peak = mem.peak();
  // Start-up holds no more than the model states: each rank generates or reads only its own slices,
  // one tensor at a time (Trainer::initialise_parameters).
  return peak.total() - peak.reserved;
}

double available_node_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  double kib = 0;
  while (f >> key) {
    if (key == "MemAvailable:" && f >> kib) break;
    f.ignore(1 << 20, '\n');
  }
  double bytes = kib * 1024.0;
  if (const auto headroom = cgroup_headroom()) bytes = std::min(bytes, *headroom);
  return bytes;
}

std::optional<std::string> memory_refusal(const Config& cfg, double needed, double available, double node_available,
                                          int ranks_on_node) {
  if (needed <= available) return std::nullopt;
  std::string options;
  for (const auto& alt : alternatives(cfg)) {
    const double need = estimated_rank_bytes(alt.cfg);
    options += fmt::format("{} ({}{}); ", alt.change, gb(need), need <= available ? ", fits" : ", still too much");
  }
  return fmt::format(
      "{}: not enough memory to train this layout: the planner estimates {} per rank, but {} is available per rank "
      "({} available on this node, shared by {} rank(s)). Options: {}more ranks along mesh.pp or mesh.tp (each holds "
      "a smaller part of the model){}; `trident plan {}` lists layouts that fit. To try anyway: "
      "--set runtime.memory_check=false",
      cfg.source, gb(needed), gb(available), gb(node_available), ranks_on_node, options,
      cfg.mesh.dp > 1 && cfg.mesh.zero == 0 ? "; mesh.zero = 1 shards the optimizer state over DP" : "", cfg.source);
}

void check_memory_fits(const Config& cfg, int ranks_on_node) {
  if (!cfg.runtime.memory_check || cfg.runtime.backend != Backend::Cpu) return;
  const double node = available_node_bytes();
  if (node <= 0) return;  // no /proc/meminfo: nothing to compare with
  const double per_rank = node / std::max(1, ranks_on_node);
  if (auto refusal = memory_refusal(cfg, estimated_rank_bytes(cfg), per_rank, node, ranks_on_node))
    throw Error(*refusal);
}

}  // namespace trident
