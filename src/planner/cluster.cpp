#include "planner/cluster.hpp"

#include "deck/toml_text.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>

#include "core/error.hpp"

namespace trident::planner {
namespace {

// ---------------------------------------------------------------------------------------------------
// Presets. Sources: NVIDIA A100 and H100/H200 datasheets (dense peaks, i.e. without 2:4 sparsity;
// HBM bandwidth), DGX A100/H100 system guides (8 GPUs per node, NVLink 3/4, one HDR/NDR InfiniBand
// port per GPU). Link bandwidths are what NCCL all-reduce "bus bandwidth" reaches in practice, below
// the nominal rates (NVLink3 300 GB/s, NVLink4 450 GB/s per direction; HDR 25 GB/s, NDR 50 GB/s).
// reserved_gib (CUDA context, cuBLAS/NCCL workspaces, allocator fragmentation) is a rough allowance.
// The GEMM figures are rough too: large bf16 GEMMs reach 70-80% of peak on A100/H100, small ones less.
// The `cpu` preset is this project's own machine kind, measured (see docs/planner.md).
// ---------------------------------------------------------------------------------------------------
ClusterSpec gpu_base(const std::string& name) {
  ClusterSpec c;
  c.name = name;
  c.source = "preset";
  c.nodes = 0;
  c.gpus_per_node = 8;
  c.reserved_gib = 3.0;
  c.inter_node = {22.0, 10.0};
  c.intra_node = {230.0, 5.0};
  return c;
}

std::map<std::string, ClusterSpec> make_presets() {
  std::map<std::string, ClusterSpec> p;
  {
    ClusterSpec c = gpu_base("a100-40g");
    c.description = "DGX A100 nodes: 8x A100-SXM4-40GB, NVLink3/NVSwitch, 1x HDR 200 Gb/s InfiniBand per GPU";
    c.memory_gib = 40;
    c.peak_tflops_bf16 = 312;
    c.peak_tflops_fp32 = 19.5;
    c.gemm_efficiency = 0.75;
    c.gemm_half_gflop = 0.4;
    c.memory_bandwidth_gbs = 1555;
    p[c.name] = c;
  }
  {
    ClusterSpec c = p.at("a100-40g");
    c.name = "a100-80g";
    c.description = "DGX A100 nodes: 8x A100-SXM4-80GB, NVLink3/NVSwitch, 1x HDR 200 Gb/s InfiniBand per GPU";
    c.memory_gib = 80;
    c.memory_bandwidth_gbs = 2039;
    p[c.name] = c;
  }
  {
    ClusterSpec c = gpu_base("h100-80g");
    c.description = "DGX H100 nodes: 8x H100-SXM5-80GB, NVLink4/NVSwitch, 1x NDR 400 Gb/s InfiniBand per GPU";
    c.memory_gib = 79.6;  // 81559 MiB visible
    c.peak_tflops_bf16 = 989;
    c.peak_tflops_fp32 = 67;
    c.gemm_efficiency = 0.70;
    c.gemm_half_gflop = 1.5;
    c.memory_bandwidth_gbs = 3350;
    c.intra_node = {360.0, 5.0};
    c.inter_node = {45.0, 10.0};
    p[c.name] = c;
  }
  {
    ClusterSpec c = p.at("h100-80g");
    c.name = "h200";
    c.description = "DGX H200 nodes: 8x H200-SXM-141GB, NVLink4/NVSwitch, 1x NDR 400 Gb/s InfiniBand per GPU";
    c.memory_gib = 140.4;  // 143771 MiB visible of the 141 GB (1e9) datasheet figure
    c.memory_bandwidth_gbs = 4800;
    p[c.name] = c;
  }
  {
    // This project's machine kind, measured on it (docs/planner.md, "The cpu preset"): one node, 2 cores,
    // one rank per core with one BLAS thread; OpenBLAS sgemm ~100 GFLOP/s per core on the AMD EPYC host
    // measured (a Xeon host of the same kind measured ~170); the cpu backend's memory-bound kernels reach
    // 1-7 GB/s (benchmarks/README.md, Kernels; a STREAM-like triad reaches ~26 GB/s); MPICH over shared
    // memory: ~0.5 us small-message latency, 2-6 GB/s all-reduce bus bandwidth.
    ClusterSpec c;
    c.name = "cpu";
    c.source = "preset";
    c.description = "this machine kind: 1 node, 2 cores (one rank per core, one BLAS thread), 24 GiB shared, MPI "
                    "over shared memory";
    c.nodes = 1;
    c.gpus_per_node = 2;
    c.memory_gib = 11.5;  // 23 GiB usable, shared by the node's ranks
    // What a trident rank holds beyond the backend's allocations (code, libraries, MPI, allocator
    // slack, mapped data): 38-46 MiB measured (benchmarks/README.md, "Memory per rank").
    c.reserved_gib = 0.045;
    c.peak_tflops_bf16 = 0;  // the cpu backend computes in fp32
    c.peak_tflops_fp32 = 0.100;
    c.gemm_efficiency = 1.0;  // the peak above is the measured large-sgemm rate
    c.gemm_half_gflop = 0.01;
    c.memory_bandwidth_gbs = 5;
    c.intra_node = {4.0, 2.0};
    c.inter_node = {4.0, 2.0};
    c.oversubscribe = true;
    // 472 MiB of gradients reduced per step over dp 2 take 1.0-1.8 s more than the step without them
    // (benchmarks/README.md, "Planner calibration: measured"; the run reports "DP reduction waits").
    c.dp_reduce_gbs = 0.48;
    p[c.name] = c;
  }
  return p;
}

const std::map<std::string, ClusterSpec>& presets() {
  static const std::map<std::string, ClusterSpec> p = make_presets();
  return p;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  // A prefix ("bandwidth" for "bandwidth_gbs") counts as close.
  const std::string best = closest_match(word, candidates, /*prefixes=*/true);
  return best.empty() ? "" : fmt::format("; did you mean '{}'?", best);
}

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

// One key of the cluster file.
enum class Kind { Int, Float, Bool, String };
struct KeyDef {
  std::string table;  // "" (top level), "intra_node" or "inter_node"
  std::string key;
  Kind kind;
  double lo, hi;      // inclusive range for numbers
  bool required;      // required unless `base` names a preset
  std::function<void(ClusterSpec&, const toml::node&)> set;
  std::function<std::string(const ClusterSpec&)> get;  // as TOML text
};

std::string num(double v) {
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

const std::vector<KeyDef>& key_defs() {
  constexpr double inf = 1e300;
  static const std::vector<KeyDef> defs = [] {
    std::vector<KeyDef> d;
    auto str = [&](const char* key, std::string ClusterSpec::*m) {
      d.push_back({"", key, Kind::String, 0, 0, false,
                   [m](ClusterSpec& c, const toml::node& n) { c.*m = *n.value<std::string>(); },
                   [m](const ClusterSpec& c) { return fmt::format("\"{}\"", c.*m); }});
    };
    auto integer = [&](const char* key, int ClusterSpec::*m, double lo, double hi, bool req) {
      d.push_back({"", key, Kind::Int, lo, hi, req,
                   [m](ClusterSpec& c, const toml::node& n) { c.*m = int(*n.value<int64_t>()); },
                   [m](const ClusterSpec& c) { return fmt::format("{}", c.*m); }});
    };
    auto real = [&](const char* key, double ClusterSpec::*m, double lo, double hi, bool req) {
      d.push_back({"", key, Kind::Float, lo, hi, req,
                   [m](ClusterSpec& c, const toml::node& n) { c.*m = *n.value<double>(); },
                   [m](const ClusterSpec& c) { return num(c.*m); }});
    };
    auto link = [&](const char* table, LinkSpec ClusterSpec::*l, const char* key, double LinkSpec::*m, double lo,
                    bool req) {
      d.push_back({table, key, Kind::Float, lo, inf, req,
                   [l, m](ClusterSpec& c, const toml::node& n) { c.*l.*m = *n.value<double>(); },
                   [l, m](const ClusterSpec& c) { return num(c.*l.*m); }});
    };
    str("name", &ClusterSpec::name);
    str("description", &ClusterSpec::description);
    d.push_back({"", "base", Kind::String, 0, 0, false, [](ClusterSpec&, const toml::node&) {},
                 [](const ClusterSpec&) { return std::string(); }});
    integer("nodes", &ClusterSpec::nodes, 0, 1 << 20, false);
    integer("gpus_per_node", &ClusterSpec::gpus_per_node, 1, 4096, true);
    real("memory_gib", &ClusterSpec::memory_gib, 1e-3, inf, true);
    real("reserved_gib", &ClusterSpec::reserved_gib, 0, inf, false);
    real("peak_tflops_bf16", &ClusterSpec::peak_tflops_bf16, 0, inf, false);
    real("peak_tflops_fp32", &ClusterSpec::peak_tflops_fp32, 0, inf, false);
    real("gemm_efficiency", &ClusterSpec::gemm_efficiency, 1e-3, 1.0, false);
    real("gemm_half_gflop", &ClusterSpec::gemm_half_gflop, 0, inf, false);
    real("memory_bandwidth_gbs", &ClusterSpec::memory_bandwidth_gbs, 1e-3, inf, true);
    real("dp_reduce_gbs", &ClusterSpec::dp_reduce_gbs, 0, inf, false);
    d.push_back({"", "oversubscribe", Kind::Bool, 0, 0, false,
                 [](ClusterSpec& c, const toml::node& n) { c.oversubscribe = *n.value<bool>(); },
                 [](const ClusterSpec& c) { return std::string(c.oversubscribe ? "true" : "false"); }});
    link("intra_node", &ClusterSpec::intra_node, "bandwidth_gbs", &LinkSpec::bandwidth_gbs, 1e-6, true);
    link("intra_node", &ClusterSpec::intra_node, "latency_us", &LinkSpec::latency_us, 0, false);
    link("inter_node", &ClusterSpec::inter_node, "bandwidth_gbs", &LinkSpec::bandwidth_gbs, 1e-6, true);
    link("inter_node", &ClusterSpec::inter_node, "latency_us", &LinkSpec::latency_us, 0, false);
    return d;
  }();
  return defs;
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Int: return "an integer";
    case Kind::Float: return "a number";
    case Kind::Bool: return "a boolean";
    case Kind::String: return "a string";
  }
  return "";
}

class ClusterReader {
 public:
  explicit ClusterReader(std::string source) : source_(std::move(source)) {}

  ClusterSpec read(const std::string& text) {
    toml::table root;
    try {
      root = toml::parse(text, source_);
    } catch (const toml::parse_error& e) {
      const auto& b = e.source().begin;
      throw Error(fmt::format("{}:{}:{}: TOML syntax error: {}", source_, b.line, b.column, e.description()));
    }
    ClusterSpec c;
    bool from_base = false;
    if (const toml::node* base = root.get("base")) {
      if (!base->is_string())
        fail(*base, "base", fmt::format("must be a string naming a preset, got {}", toml_type_name(*base)));
      const std::string name = *base->value<std::string>();
      if (!is_cluster_preset(name))
        fail(*base, "base",
             fmt::format("'{}' is not a preset (presets: {}){}", name, join(cluster_preset_names()),
                         did_you_mean(name, cluster_preset_names())));
      c = cluster_preset(name);
      from_base = true;
    } else {
      c = ClusterSpec{};
      c.gpus_per_node = 0;
    }
    c.source = source_;
    if (!root.contains("name")) c.name = std::filesystem::path(source_).stem().string();

    check_unknown(root, "");
    for (const char* t : {"intra_node", "inter_node"}) {
      if (const toml::node* n = root.get(t)) {
        if (!n->is_table()) fail(*n, t, fmt::format("must be a table ([{}]), got {}", t, toml_type_name(*n)));
        check_unknown(*n->as_table(), t);
      }
    }
    for (const KeyDef& k : key_defs()) {
      const toml::table* tbl = k.table.empty() ? &root : root[k.table].as_table();
      const std::string full = k.table.empty() ? k.key : k.table + "." + k.key;
      const toml::node* n = tbl ? tbl->get(k.key) : nullptr;
      if (!n) {
        if (k.required && !from_base)
          throw Error(fmt::format("{}: missing key '{}' ({}); or set base = \"<preset>\" to start from a preset",
                                  source_, full, kind_name(k.kind)));
        continue;
      }
      check_value(*n, k, full);
      k.set(c, *n);
    }
    if (c.peak_tflops_bf16 <= 0 && c.peak_tflops_fp32 <= 0)
      throw Error(fmt::format("{}: peak_tflops_bf16 and peak_tflops_fp32 are both 0: give at least one", source_));
    return c;
  }

 private:
  std::string source_;

  [[noreturn]] void fail(const toml::node& n, const std::string& key, const std::string& what) const {
    const auto& b = n.source().begin;
    throw Error(fmt::format("{}:{}:{}: key '{}' {}", source_, b.line, b.column, key, what));
  }

  void check_unknown(const toml::table& t, const std::string& table) const {
    std::vector<std::string> allowed;
    for (const KeyDef& k : key_defs())
      if (k.table == table) allowed.push_back(k.key);
    if (table.empty()) allowed.insert(allowed.end(), {"intra_node", "inter_node"});
    for (const auto& [key, node] : t) {
      const std::string name(key.str());
      if (std::find(allowed.begin(), allowed.end(), name) != allowed.end()) continue;
      const auto& b = key.source().begin.line > 0 ? key.source().begin : node.source().begin;
      const std::string full = table.empty() ? name : table + "." + name;
      throw Error(fmt::format("{}:{}:{}: unknown key '{}' in the cluster file (allowed{}: {}){}", source_, b.line,
                              b.column, full, table.empty() ? "" : " in [" + table + "]", join(allowed),
                              did_you_mean(name, allowed)));
    }
  }

  void check_value(const toml::node& n, const KeyDef& k, const std::string& full) const {
    const bool ok = (k.kind == Kind::Int && n.is_integer()) ||
                    (k.kind == Kind::Float && (n.is_floating_point() || n.is_integer())) ||
                    (k.kind == Kind::Bool && n.is_boolean()) || (k.kind == Kind::String && n.is_string());
    if (!ok) fail(n, full, fmt::format("must be {}, got {}", kind_name(k.kind), toml_type_name(n)));
    if (k.kind == Kind::Int || k.kind == Kind::Float) {
      const double v = n.is_integer() ? double(*n.value<int64_t>()) : *n.value<double>();
      if (!std::isfinite(v) || v < k.lo || v > k.hi)
        fail(n, full,
             fmt::format("= {} is out of range (allowed: {} >= {}{})", v, kind_name(k.kind), k.lo,
                         k.hi < 1e299 ? fmt::format(" and <= {}", k.hi) : std::string()));
    }
  }
};

}  // namespace

const std::vector<std::string>& cluster_preset_names() {
  static const std::vector<std::string> names = {"a100-40g", "a100-80g", "h100-80g", "h200", "cpu"};
  return names;
}

bool is_cluster_preset(const std::string& name) { return presets().count(name) > 0; }

ClusterSpec cluster_preset(const std::string& name) {
  auto it = presets().find(name);
  if (it == presets().end())
    throw Error(fmt::format("unknown cluster preset '{}' (presets: {}){}", name, join(cluster_preset_names()),
                            did_you_mean(name, cluster_preset_names())));
  return it->second;
}

ClusterSpec parse_cluster(const std::string& text, const std::string& source_name) {
  return ClusterReader(source_name).read(text);
}

ClusterSpec load_cluster(const std::string& name_or_path) {
  if (is_cluster_preset(name_or_path)) return cluster_preset(name_or_path);
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(name_or_path, ec)) {
    const bool looks_like_path = name_or_path.find('/') != std::string::npos ||
                                 fs::path(name_or_path).extension() == ".toml";
    if (looks_like_path) throw Error(fmt::format("{}: cannot open the cluster file (no such file)", name_or_path));
    throw Error(fmt::format("--cluster '{}' is neither a preset ({}) nor a file{}", name_or_path,
                            join(cluster_preset_names()), did_you_mean(name_or_path, cluster_preset_names())));
  }
  if (fs::is_directory(name_or_path, ec))
    throw Error(fmt::format("{}: is a directory, not a cluster file", name_or_path));
  std::ifstream f(name_or_path, std::ios::binary);
  if (!f) throw Error(fmt::format("{}: cannot open the cluster file ({})", name_or_path, std::strerror(errno)));
  std::ostringstream os;
  os << f.rdbuf();
  return parse_cluster(os.str(), name_or_path);
}

std::string cluster_to_toml(const ClusterSpec& c) {
  std::ostringstream os;
  std::string table;
  for (const KeyDef& k : key_defs()) {
    if (k.key == "base") continue;
    if (k.table != table) {
      table = k.table;
      os << "\n[" << table << "]\n";
    }
    os << k.key << " = " << k.get(c) << "\n";
  }
  return os.str();
}

}  // namespace trident::planner
