#include "planner/plan_command.hpp"

#include <CLI/CLI.hpp>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <sstream>

#include "core/error.hpp"

namespace trident::planner {
namespace {

std::string gb(double bytes) { return fmt::format("{:.2f} GB", bytes / kGB); }

// Seconds with three significant digits.
std::string secs(double s) {
  if (s == 0) return "0";
  if (s >= 100) return fmt::format("{:.0f}", s);
  if (s >= 10) return fmt::format("{:.1f}", s);
  return fmt::format("{:.3g}", s);
}

std::string rate_text(double x) { return x >= 1000 ? fmt::format("{:.0f}", x) : fmt::format("{:.4g}", x); }

std::string sched_name(const Layout& l) {
  if (l.schedule == Schedule::Interleaved) return fmt::format("interleaved:{}", l.virtual_stages);
  return to_string(l.schedule);
}

std::string link_name(bool intra) { return intra ? "intra-node" : "inter-node"; }

std::string workload_line(const Config& cfg) {
  const auto& m = cfg.model;
  const double n = double(parameter_count(m));
  return fmt::format(
      "workload: {} parameters ({} layers, hidden {}, {} heads, ffn {}, seq {}, vocab {}), global batch {} "
      "({:.3g}M tokens/step), {}",
      n >= 1e9 ? fmt::format("{:.4g}B", n / 1e9) : fmt::format("{:.4g}M", n / 1e6), m.layers, m.hidden, m.heads, ffn_hidden_of(m), m.seq_len, m.vocab_size,
      cfg.train.global_batch, double(cfg.tokens_per_step()) / 1e6, to_string(cfg.train.precision));
}

std::string cluster_line(const ClusterSpec& c, int nodes, const std::string& why) {
  const double peak = c.peak_tflops_bf16 > 0 ? c.peak_tflops_bf16 : c.peak_tflops_fp32;
  return fmt::format(
      "cluster: {}{} ({}): {} nodes x {} devices; per device {:.1f} GB ({:g} GiB), peak {:g} TFLOP/s {} "
      "(x{:g} for GEMMs), memory {:g} GB/s; intra-node {:g} GB/s {:g} us, inter-node {:g} GB/s {:g} us",
      c.name, why, c.source == "preset" ? "preset" : c.source, nodes, c.gpus_per_node, c.memory_gib * kGiB / kGB,
      c.memory_gib, peak, c.peak_tflops_bf16 > 0 ? "bf16" : "fp32", c.gemm_efficiency, c.memory_bandwidth_gbs,
      c.intra_node.bandwidth_gbs, c.intra_node.latency_us, c.inter_node.bandwidth_gbs, c.inter_node.latency_us);
}

double other_memory(const StageMemory& s) { return s.buffers() + s.runtime(); }
double activation_memory(const StageMemory& s) { return s.all_activations(); }
double compute_time(const TimeBreakdown& t) {
  return t.compute_forward + t.compute_backward + t.compute_recompute + t.elementwise;
}

int world_rank() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (!init || fin) return 0;
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// The activation formula of the layout with its coefficients, as in Korthikanti et al. 2022.
std::string activation_formula(const Config& cfg, const Layout& l) {
  const StorageBytes bytes = storage_bytes(cfg.train.precision);
  const double e = bytes.saved_activation, r = bytes.residual, d = kTridentDropout ? 1 : 0;
  const double f = double(ffn_hidden_of(cfg.model)) / double(cfg.model.hidden);
  const double rep = 2 * r + 2 * e + 2 * d, split = 4 * e + 2 * e * f, q = e + d + d * e;
  if (l.recompute == Recompute::Full) return fmt::format("{:g}sbh{} (the layer input only)", r, l.sequence_parallel ? "/t" : "");
  std::string lin = l.sequence_parallel ? fmt::format("sbh*{:g}/t", rep + split)
                                        : fmt::format("sbh*({:g} + {:g}/t)", rep, split);
  if (l.recompute == Recompute::Selective) return lin + " (attention scores recomputed)";
  if (kTridentFlashAttention) return lin + " + 4*a*s*b/t (flash-style attention: the log-sum-exp, no scores)";
  return lin + fmt::format(" + {:g}*a*s^2*b/t", q);
}

// Why the search found nothing: the constraints with the deck's numbers.
std::string no_layout_message(const Config& cfg, const ClusterSpec& cluster, const SearchPins& pins) {
  const int devices =
      pins.mesh_pinned() ? *pins.tp * *pins.pp * *pins.dp : resolve_nodes(cfg, cluster, pins) * cluster.gpus_per_node;
  std::string msg = fmt::format("no layout of {} devices satisfies the pins and the deck's rules", devices);
  for (const auto& [name, pin] : {std::pair<const char*, std::optional<int>>{"tp", pins.tp}, {"pp", pins.pp}, {"dp", pins.dp}})
    if (pin && devices % *pin != 0) return msg + fmt::format(": --{} {} does not divide {} devices", name, *pin, devices);
  // A layout made of the pins and defaults for the rest: the first rule it breaks.
  Layout l;
  l.tp = pins.tp.value_or(1);
  l.pp = pins.pp.value_or(1);
  l.dp = pins.dp.value_or(1);
  l.micro_batch = pins.micro_batch.value_or(1);
  l.schedule = pins.schedule.value_or(Schedule::OneFOneB);
  l.virtual_stages = pins.virtual_stages.value_or(l.schedule == Schedule::Interleaved ? 2 : 1);
  l.zero = pins.zero.value_or(0);
  l.recompute = pins.recompute.value_or(Recompute::None);
  l.sequence_parallel = pins.sequence_parallel.value_or(false);
  const std::string rule = layout_rule_violation(cfg, l);
  if (!rule.empty()) return msg + ": " + rule;
  return msg + fmt::format(
                   " (tp*pp*dp = {} with tp dividing heads = {} and ffn_hidden = {}, dp dividing global_batch = {}, "
                   "pp*virtual_stages <= layers = {}); plan for fewer devices with --nodes, or pin the mesh",
                   devices, cfg.model.heads, ffn_hidden_of(cfg.model), cfg.train.global_batch, cfg.model.layers);
}

}  // namespace

std::string default_cluster_for(const Config& cfg) {
  return cfg.runtime.backend == Backend::Cpu ? "cpu" : "h100-80g";
}

std::string format_table(const std::vector<LayoutEstimate>& rows, size_t first_rank) {
  std::ostringstream os;
  os << fmt::format("{:>4} {:>3} {:>4} {:>5} {:>4} {:>6} {:<14} {:>4} {:<9} {:<3} | {:>7} = {:>6} {:>6} {:>6} {:>6} {:>6} | "
                    "{:>8} = {:>8} {:>7} {:>7} {:>7} {:>7} | {:>10} {:>7} {:>6} {}\n",
                    "#", "tp", "pp", "dp", "mb", "m", "schedule", "zero", "recompute", "sp", "mem GB", "params",
                    "grads", "optim", "activ", "other", "step s", "compute", "tp", "bubble", "p2p", "dp+opt", "tokens/s",
                    "TFLOP/s", "MFU", "");
  size_t r = first_rank;
  for (const auto& e : rows) {
    const Layout& l = e.layout;
    const StageMemory& pk = e.memory.peak();
    const TimeBreakdown& t = e.time;
    os << fmt::format(
        "{:>4} {:>3} {:>4} {:>5} {:>4} {:>6} {:<14} {:>4} {:<9} {:<3} | {:>7.1f} = {:>6.1f} {:>6.1f} {:>6.1f} {:>6.1f} "
        "{:>6.1f} | {:>8} = {:>8} {:>7} {:>7} {:>7} {:>7} | {:>10} {:>7.4g} {:>5.1f}% {}\n",
        first_rank == 0 ? std::string("-") : std::to_string(r++), l.tp, l.pp, l.dp, l.micro_batch, t.micro_batches, sched_name(l), l.zero, to_string(l.recompute),
        l.sequence_parallel ? "on" : "off", e.memory_gb, pk.states.parameters / kGB, pk.states.gradients / kGB,
        pk.states.optimizer() / kGB, activation_memory(pk) / kGB, other_memory(pk) / kGB, secs(e.step_s),
        secs(compute_time(t)), secs(t.tp_comm), secs(t.pp_bubble), secs(t.pp_p2p), secs(t.dp_in_clock + t.after_flush),
        rate_text(e.tokens_per_s), e.tflops_per_gpu, 100 * e.mfu, e.fits ? "" : "(does not fit)");
  }
  return os.str();
}

std::string explain_estimate(const Config& cfg, const ClusterSpec& cluster, const LayoutEstimate& e) {
  const Layout& l = e.layout;
  const auto& m = cfg.model;
  const Placement& pl = e.placement;
  const MemoryEstimate& mem = e.memory;
  const StageMemory& pk = mem.peak();
  const TimeBreakdown& t = e.time;
  const bool bf16 = cfg.train.precision == Precision::BF16;
  std::ostringstream os;
  os << "layout: " << describe(l) << "\n";
  os << fmt::format("placement: {} ranks on {} node(s), {} per node (order {}){}; TP groups {}, PP groups {}, DP groups {}\n",
                    l.world(), pl.nodes, pl.ranks_per_node, cfg.mesh.order,
                    pl.share < 1 ? fmt::format(", oversubscribed: each rank gets {:.2g} of a device", pl.share) : "",
                    link_name(pl.tp_intra), link_name(pl.pp_intra), link_name(pl.dp_intra));
  os << fmt::format("micro-batches per step m = global_batch/(micro_batch*dp) = {}/({}*{}) = {}\n\n", cfg.train.global_batch,
                    l.micro_batch, l.dp, t.micro_batches);

  os << "Memory per device (GB = 1e9 bytes)\n";
  os << fmt::format("  activations per layer per micro-batch (Korthikanti et al. 2022, {} activations, {}): {}\n",
                    bf16 ? "2-byte saved, 4-byte residual" : "4-byte", kTridentDropout ? "dropout" : "no dropout",
                    activation_formula(cfg, l));
  os << fmt::format("    with s={} b={} h={} a={} t={}: {:.4g} MB\n", m.seq_len, l.micro_batch, m.hidden, m.heads, l.tp,
                    pk.per_layer_activation / 1e6);
  os << fmt::format("  peak on stage {} of {} ({} layers, {:.3g} micro-batches in flight for {}):\n", pk.stage, l.pp,
                    pk.layers, pk.in_flight, sched_name(l));
  const bool zero3 = l.dp > 1 && l.zero >= 3;
  const bool working_copy = cfg.train.bf16_working_copy() && !zero3;
  os << fmt::format("    parameters          {:>10}  ({:.4g}M params x {}{})\n", gb(pk.states.parameters),
                    pk.params / 1e6, working_copy ? "2 bytes (the bf16 working copy)" : "4 bytes",
                    zero3           ? fmt::format(", / dp = {} (zero 3)", l.dp)
                    : working_copy ? fmt::format(", + 4 bytes x {:.4g}M biases, norms and position embedding kept in fp32, + "
                                                 "the fp32 buffer of the segment widened at once (a layer, or the "
                                                 "position embedding)",
                                                 stage_fp32_copy_params_per_rank(m, l, pk.stage, pk.layers) / 1e6)
                                   : "");
  os << fmt::format("    gradients           {:>10}  (4 bytes/param{})\n", gb(pk.states.gradients),
                    l.zero >= 2 ? fmt::format(", / dp = {} (zero {})", l.dp, l.zero) : "");
  const std::string masters =
      !bf16                ? "none in fp32 training"
      : zero3              ? "none: ZeRO-3's fp32 partitions are the masters"
      : working_copy       ? fmt::format("fp32, 4 bytes/param{}", l.dp > 1 && l.zero >= 1 ? fmt::format(", / dp = {}", l.dp) : "")
                           : "none: train.bf16_parameters = false computes with the fp32 parameters";
  os << fmt::format("    master weights      {:>10}  ({})\n", gb(pk.states.master_weights), masters);
  os << fmt::format("    optimizer moments   {:>10}  (Adam m and v, 8 bytes/param{})\n", gb(pk.states.optimizer_moments),
                    l.zero >= 1 ? fmt::format(", / dp = {} (zero {})", l.dp, l.zero) : "");
  os << fmt::format("    activations         {:>10}  ({:.3g} in flight x {} layers x {:.4g} MB)\n", gb(pk.activations),
                    pk.in_flight, pk.layers, pk.per_layer_activation / 1e6);
  os << fmt::format("    embedding/LM head   {:>10}  (last stage: final LN input, head input, fp32 logits of a chunk of rows x V/t)\n",
                    gb(pk.edge_activations));
  os << fmt::format("    recompute working   {:>10}  (one layer's activations in fp32 during its backward: recomputed, "
                    "or unpacked from bf16)\n",
                    gb(pk.recompute_working));
  os << fmt::format("    buffers             {:>10}  ({}, PP receive buffers, SP all-gather)\n", gb(pk.comm_buffers),
                    l.zero >= 3   ? "zero-3 gradient staging and gathered layers"
                    : l.zero == 2 ? "zero-2 gradient staging"
                                  : "DP buckets");
  if (pk.gemm_copies > 0)
    os << fmt::format("    GEMM operand copies {:>10}  (the largest GEMM's rounded dY, W and X; none of bf16 patterns)\n", gb(pk.gemm_copies));
  os << fmt::format("    runtime             {:>10}  (cluster reserved_gib: code, libraries, MPI, device context)\n",
                    gb(pk.reserved));
  os << fmt::format("    total               {:>10}  of {} per device: {}\n", gb(pk.total()), gb(mem.capacity),
                    e.fits ? "fits" : "DOES NOT FIT");
  os << "  per stage (GB):";
  for (size_t s = 0; s < mem.stages.size(); ++s) {
    if (mem.stages.size() > 12 && s >= 4 && s + 4 < mem.stages.size() && int(s) != mem.peak_stage) {
      if (s == 4) os << " ...";
      continue;
    }
    os << fmt::format(" {}:{:.1f}", s, mem.stages[s].total() / kGB);
  }
  os << "\n\n";

  const StageTime& cs = t.stages.at(t.critical_stage);
  const double tokens = double(l.micro_batch) * double(m.seq_len);
  const double rate = gemm_rate(cluster, cfg.train, 2 * tokens * double(m.hidden) * double(m.hidden) / l.tp);
  os << "Step time\n";
  os << fmt::format("  GEMM rate: {:.4g} TFLOP/s per device = peak {:g} x efficiency {:g} x size factor {:.3f}{}\n",
                    rate * pl.share / 1e12, t.peak_tflops, cluster.gemm_efficiency,
                    rate / (t.peak_tflops * 1e12 * cluster.gemm_efficiency),
                    pl.share < 1 ? fmt::format(" x device share {:.2g}", pl.share) : "");
  os << fmt::format("  per micro-batch on the slowest stage ({}): forward {} + backward {} + recompute {} + elementwise {} + "
                    "TP comm {} + boundary p2p {}{} = {} s\n",
                    t.critical_stage, secs(cs.forward), secs(cs.backward), secs(cs.recompute), secs(cs.elementwise),
                    secs(cs.tp_comm), secs(cs.pp_p2p),
                    cs.dp_comm > 0 ? fmt::format(" + exposed ZeRO-2 reduce-scatter {}", secs(cs.dp_comm)) : "",
                    secs(cs.total()));
  if (l.tp > 1)
    os << fmt::format("  TP: per layer {} {} of {:.3g} MB over the {} link\n",
                      l.recompute == Recompute::Full ? 6 : 4,
                      l.sequence_parallel ? "all-gather + reduce-scatter pairs" : "all-reduces",
                      4.0 * tokens * double(m.hidden) / 1e6, link_name(pl.tp_intra));
  os << fmt::format("  pipeline: m x clock = {} x {} = {} s; bubble (pp-1)/{} = {:.4g} of that -> {} s\n",
                    t.micro_batches, secs(t.per_microbatch), secs(t.micro_batches * t.per_microbatch),
                    l.schedule == Schedule::Interleaved ? "(v*m)" : "m", t.bubble_fraction, secs(t.pp_bubble));
  if (l.zero >= 2 && l.dp > 1)
    os << fmt::format("  DP (zero 2): a gradient reduce-scatter per micro-batch over the {} link, {} s per step, of which "
                      "{} s is not hidden behind the backward passes (in the clock above)\n",
                      link_name(pl.dp_intra), secs(t.dp_comm), secs(t.dp_comm_exposed));
  else if (l.dp > 1)
    os << fmt::format("  DP: gradient all-reduce {} s over the {} link, overlapped with the last micro-batch's backward: "
                      "{} s exposed (stage {})\n",
                      secs(t.dp_comm), link_name(pl.dp_intra), secs(t.dp_comm_exposed), t.tail_stage);
  os << fmt::format("  after the flush (stage {}): exposed DP {} s + ZeRO parameter all-gather {} s + tied-embedding sync "
                    "{} s + optimizer {} s, less the slack of earlier-finishing stages -> {} s\n",
                    t.tail_stage, secs(l.zero >= 2 ? 0.0 : t.dp_comm_exposed), secs(t.zero_allgather),
                    secs(t.embedding_sync), secs(t.optimizer), secs(t.after_flush));
  os << fmt::format("  step {} s; {:.5g} tokens/s\n", secs(t.step), t.tokens_per_s);
  os << fmt::format("  model FLOPs/step {:.4g} (3 x forward, no recompute); {:.4g} TFLOP/s per device; MFU {:.1f}% "
                    "(recompute not counted), HFU {:.1f}% (recompute counted)\n",
                    t.model_flops, t.tflops_per_gpu, 100 * t.mfu, 100 * t.hfu);
  return os.str();
}

std::string plan_report(const Config& cfg, const PlanOptions& o) {
  const bool defaulted = o.cluster.empty();
  const std::string name = defaulted ? default_cluster_for(cfg) : o.cluster;
  const ClusterSpec cluster = load_cluster(name);
  const int top = std::max(1, o.top);

  std::vector<LayoutEstimate> all = search(cfg, cluster, o.pins);
  if (all.empty()) throw Error(no_layout_message(cfg, cluster, o.pins));
  const size_t fitting = size_t(std::count_if(all.begin(), all.end(), [](const LayoutEstimate& e) { return e.fits; }));
  std::vector<LayoutEstimate> shown(all.begin(), all.begin() + std::min<size_t>(all.size(), top));

  if (o.json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& e : shown) arr.push_back(to_json(e));
    return arr.dump(2) + "\n";
  }

  std::ostringstream os;
  const int nodes = o.pins.mesh_pinned() ? all.front().placement.nodes : resolve_nodes(cfg, cluster, o.pins);
  os << fmt::format("trident plan: {}\n", cfg.source);
  os << workload_line(cfg) << "\n";
  os << cluster_line(cluster, nodes,
                     defaulted ? fmt::format(" [default for backend \"{}\"; choose with --cluster]", to_string(cfg.runtime.backend))
                               : std::string())
     << "\n";
  os << fmt::format("searched {} layouts; {} fit in memory.", all.size(), fitting);
  if (fitting > 0)
    os << fmt::format(" Best {} by predicted throughput:\n", shown.size());
  else
    os << fmt::format(" None fits; the {} closest:\n", shown.size());
  os << "(memory: the peak stage, per device, GB = 1e9 bytes; optim = master weights + Adam moments; activ = activations\n"
        " + LM-head extras + recompute working set; other = buffers + runtime. Time per step, s: step = compute\n"
        " (forward + backward + recompute + elementwise) + tp + bubble + p2p + dp+opt (exposed DP reduction, ZeRO\n"
        " all-gather, optimizer). MFU counts model FLOPs only, not recompute.)\n\n";
  os << format_table(shown);

  // Where the deck's own layout ranks.
  const Layout own = layout_of(cfg);
  auto it = std::find_if(all.begin(), all.end(), [&](const LayoutEstimate& e) { return e.layout == own; });
  if (it != all.end()) {
    const size_t r = size_t(it - all.begin()) + 1;
    if (r > shown.size())
      os << "\nthe deck's own layout:\n" << format_table({*it}, r);
    else
      os << fmt::format("\nthe deck's own layout is #{}.\n", r);
  } else if (!o.pins.mesh_pinned() && own.world() != nodes * cluster.gpus_per_node) {
    try {
      const LayoutEstimate e = evaluate(cfg, cluster, own);
      os << fmt::format("\nthe deck's own layout ({} of the {} devices, not part of the search):\n", own.world(),
                        nodes * cluster.gpus_per_node)
         << format_table({e}, 0);
    } catch (const Error&) {
      // It cannot be placed on this cluster: nothing to compare.
    }
  }
  if (o.explain) os << "\nExplanation of #1:\n" << explain_estimate(cfg, cluster, all.front());
  return os.str();
}

std::string check_memory_report(const Config& cfg, const std::string& cluster_name) {
  const bool defaulted = cluster_name.empty();
  const ClusterSpec cluster = load_cluster(defaulted ? default_cluster_for(cfg) : cluster_name);
  const Layout l = layout_of(cfg);
  const int gpn = std::max(1, cluster.gpus_per_node);
  const int needed = (l.world() + gpn - 1) / gpn;
  int nodes = 0;
  std::string note;
  if (cluster.nodes > 0 && l.world() > cluster.nodes * gpn && !cluster.oversubscribe) {
    nodes = needed;
    note = fmt::format(" (the cluster has {} nodes; the deck's layout needs {})", cluster.nodes, needed);
  }
  const Placement pl = place(cluster, l, cfg.mesh.order, nodes);
  const MemoryEstimate mem = estimate_memory(cfg, cluster, l, pl);
  const StageMemory& pk = mem.peak();
  std::ostringstream os;
  os << fmt::format("Memory per device (planner estimate, GB = 1e9 bytes; cluster {}{}{}):\n", cluster.name,
                    defaulted ? fmt::format(", the default for backend \"{}\"", to_string(cfg.runtime.backend)) : "",
                    note);
  os << fmt::format("  layout: {}\n", describe(l));
  os << fmt::format("  peak on pipeline stage {} of {} ({} layers, {:.3g} micro-batches in flight):\n", pk.stage, l.pp,
                    pk.layers, pk.in_flight);
  // The categories of `trident train`'s memory report, each with what it is made of.
  auto line = [&](const char* what, double bytes, const std::string& parts) {
    os << fmt::format("    {:<20}{:>12}{}\n", what, gb(bytes), parts);
  };
  line("parameters", pk.parameters(), "");
  line("gradients", pk.gradients(), "");
  line("optimizer state", pk.optimizer_state(),
       fmt::format("  (master weights {}, optimizer moments {})", gb(pk.states.master_weights),
                   gb(pk.states.optimizer_moments)));
  line("activations", pk.all_activations(),
       fmt::format("  (layers {}, embedding/LM head {}, recompute working {})", gb(pk.activations),
                   gb(pk.edge_activations), gb(pk.recompute_working)));
  line("buffers", pk.buffers(), fmt::format("  (DP buckets, PP receive buffers, SP all-gather; GEMM operand copies {})",
                                            gb(pk.gemm_copies)));
  line("runtime", pk.runtime(), "  (cluster reserved_gib: code, libraries, MPI, device context)");
  os << fmt::format("    {:<20}{:>12} of {} per device ({:.0f}%)\n", "total", gb(pk.total()), gb(mem.capacity),
                    100 * pk.total() / mem.capacity);
  if (!mem.fits)
    os << fmt::format("  warning: the deck's layout does not fit: {} needed on stage {}, {} available per device; "
                      "`trident plan {}` searches for layouts that fit\n",
                      gb(pk.total()), pk.stage, gb(mem.capacity), cfg.source);
  return os.str();
}

void add_plan_command(CLI::App& app, DeckLoader load_deck) {
  struct Args {
    std::string deck;
    std::vector<std::string> overrides;
    std::string cluster;
    int top = 10;
    bool json = false, explain = false;
    int tp = 1, pp = 1, dp = 1, zero = 0, nodes = 1, virtual_stages = 1;
    int64_t micro_batch = 1;
    std::string recompute, schedule, sequence_parallel;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Predict memory and step time of parallel layouts for the deck's model on a cluster, and rank them");
  // No CLI::ExistingFile: load_deck reports a missing or unreadable deck as a deck error (exit 2).
  cmd->add_option("deck", a->deck, "Input deck (TOML): its [model] and train.global_batch are the workload")
      ->required();
  cmd->add_option("--set", a->overrides, "Override a deck key: section.key=value (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  cmd->add_option("--cluster", a->cluster,
                  "Cluster TOML file or preset: a100-40g, a100-80g, h100-80g, h200, cpu (default: cpu for backend "
                  "cpu, h100-80g for cuda)");
  cmd->add_option("--top", a->top, "Layouts to show")->check(CLI::Range(1, 1000000))->capture_default_str();
  cmd->add_flag("--json", a->json, "JSON array of the shown layouts, best first");
  cmd->add_flag("--explain", a->explain, "Show the formulas and figures behind the best (or the pinned) layout");
  auto* o_tp = cmd->add_option("--tp", a->tp, "Pin the tensor-parallel degree")->check(CLI::Range(1, 1 << 16));
  auto* o_pp = cmd->add_option("--pp", a->pp, "Pin the pipeline-parallel degree")->check(CLI::Range(1, 1 << 16));
  auto* o_dp = cmd->add_option("--dp", a->dp, "Pin the data-parallel degree")->check(CLI::Range(1, 1 << 20));
  auto* o_mb = cmd->add_option("--micro-batch", a->micro_batch, "Pin the micro-batch (sequences per DP rank)")
                   ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  auto* o_zero = cmd->add_option("--zero", a->zero, "Pin the ZeRO stage")->check(CLI::Range(0, 3));
  auto* o_rc = cmd->add_option("--recompute", a->recompute, "Pin activation recomputation")
                   ->check(CLI::IsMember({"none", "selective", "full"}));
  auto* o_sched = cmd->add_option("--schedule", a->schedule, "Pin the pipeline schedule")
                      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved"}));
  auto* o_v = cmd->add_option("--virtual-stages", a->virtual_stages, "Pin the interleaved schedule's chunks per stage")
                  ->check(CLI::Range(1, 1 << 10));
  auto* o_sp = cmd->add_option("--sequence-parallel", a->sequence_parallel, "Pin sequence parallelism (on/off)")
                   ->check(CLI::IsMember({"on", "off", "true", "false"}));
  auto* o_nodes = cmd->add_option("--nodes", a->nodes, "Nodes of the cluster to plan for (overrides the cluster's)")
                      ->check(CLI::Range(1, 1 << 20));
  cmd->callback([=] {
    const Config cfg = load_deck(a->deck, a->overrides);
    PlanOptions o;
    o.cluster = a->cluster;
    o.top = a->top;
    o.json = a->json;
    o.explain = a->explain;
    if (o_tp->count()) o.pins.tp = a->tp;
    if (o_pp->count()) o.pins.pp = a->pp;
    if (o_dp->count()) o.pins.dp = a->dp;
    if (o_mb->count()) o.pins.micro_batch = a->micro_batch;
    if (o_zero->count()) o.pins.zero = a->zero;
    if (o_rc->count())
      o.pins.recompute = a->recompute == "none" ? Recompute::None
                         : a->recompute == "full" ? Recompute::Full
                                                  : Recompute::Selective;
    if (o_sched->count())
      o.pins.schedule = a->schedule == "gpipe" ? Schedule::GPipe
                        : a->schedule == "1f1b" ? Schedule::OneFOneB
                                                : Schedule::Interleaved;
    if (o_v->count()) o.pins.virtual_stages = a->virtual_stages;
    if (o_sp->count()) o.pins.sequence_parallel = a->sequence_parallel == "on" || a->sequence_parallel == "true";
    if (o_nodes->count()) o.pins.nodes = a->nodes;
    const std::string out = plan_report(cfg, o);
    if (world_rank() == 0) std::cout << out << std::flush;
  });
}

}  // namespace trident::planner
