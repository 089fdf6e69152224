#include "planner/layout.hpp"

#include <fmt/format.h>

#include <numeric>

namespace trident::planner {

std::string describe(const Layout& l) {
  std::string sched = to_string(l.schedule);
  if (l.schedule == Schedule::Interleaved) sched += fmt::format(" (v {})", l.virtual_stages);
  return fmt::format("tp {} x pp {} x dp {}, micro_batch {}, {}, zero {}, recompute {}, sequence_parallel {}", l.tp,
                     l.pp, l.dp, l.micro_batch, sched, l.zero, to_string(l.recompute),
                     l.sequence_parallel ? "on" : "off");
}

Layout layout_of(const Config& cfg) {
  Layout l;
  l.tp = cfg.mesh.tp;
  l.pp = cfg.mesh.pp;
  l.dp = cfg.mesh.dp;
  l.micro_batch = cfg.train.micro_batch;
  l.schedule = cfg.mesh.schedule;
  l.virtual_stages = cfg.mesh.virtual_stages;
  l.zero = cfg.mesh.zero;
  l.recompute = cfg.train.recompute;
  l.sequence_parallel = cfg.mesh.sequence_parallel;
  return l;
}

Config with_layout(Config cfg, const Layout& l) {
  cfg.mesh.tp = l.tp;
  cfg.mesh.pp = l.pp;
  cfg.mesh.dp = l.dp;
  cfg.train.micro_batch = l.micro_batch;
  cfg.mesh.schedule = l.schedule;
  cfg.mesh.virtual_stages = l.virtual_stages;
  cfg.mesh.zero = l.zero;
  cfg.train.recompute = l.recompute;
  cfg.mesh.sequence_parallel = l.sequence_parallel;
  return cfg;
}

int64_t ffn_hidden_of(const ModelConfig& m) { return m.ffn(); }

int64_t padded_vocab(const ModelConfig& m, int tp) {
  const int64_t mult = std::lcm(std::max<int64_t>(1, m.vocab_pad_to), int64_t(tp));
  return (m.vocab_size + mult - 1) / mult * mult;
}

int64_t micro_batches(const Config& cfg, const Layout& l) {
  return cfg.train.global_batch / (l.micro_batch * l.dp);
}

std::string layout_rule_violation(const Config& cfg, const Layout& l) {
  const auto& m = cfg.model;
  if (l.tp < 1 || l.pp < 1 || l.dp < 1 || l.micro_batch < 1 || l.virtual_stages < 1)
    return "tp, pp, dp, micro_batch and virtual_stages must be >= 1";
  if (l.zero < 0 || l.zero > 3) return fmt::format("zero = {} (allowed: 0, 1, 2, 3)", l.zero);
  if (l.zero == 3 && l.pp > 1) return fmt::format("zero = 3 needs pp = 1 (pp = {})", l.pp);
  if (m.heads % l.tp != 0) return fmt::format("heads = {} is not divisible by tp = {}", m.heads, l.tp);
  if (const int64_t kv = m.kv(); kv % l.tp != 0 && l.tp % kv != 0)
    return fmt::format("kv_heads = {} and tp = {}: neither divides the other", kv, l.tp);
  if (ffn_hidden_of(m) % l.tp != 0)
    return fmt::format("ffn_hidden = {} is not divisible by tp = {}", ffn_hidden_of(m), l.tp);
  if (cfg.train.global_batch % (l.micro_batch * l.dp) != 0)
    return fmt::format("global_batch = {} is not divisible by micro_batch*dp = {}*{}", cfg.train.global_batch,
                       l.micro_batch, l.dp);
  const int64_t mb = micro_batches(cfg, l);
  if (l.virtual_stages > 1 && l.schedule != Schedule::Interleaved)
    return fmt::format("virtual_stages = {} needs schedule \"interleaved\"", l.virtual_stages);
  if (l.schedule == Schedule::Interleaved) {
    if (l.virtual_stages < 2) return "schedule \"interleaved\" needs virtual_stages >= 2";
    if (mb % l.pp != 0)
      return fmt::format("schedule \"interleaved\" needs micro-batches per step ({}) to be a multiple of pp = {}", mb,
                         l.pp);
  }
  if (m.layers < int64_t(l.pp) * l.virtual_stages)
    return fmt::format("layers = {} cannot fill pp*virtual_stages = {} pipeline chunks", m.layers,
                       int64_t(l.pp) * l.virtual_stages);
  if (l.sequence_parallel && m.seq_len % l.tp != 0)
    return fmt::format("sequence_parallel needs seq_len = {} divisible by tp = {}", m.seq_len, l.tp);
  return "";
}

}  // namespace trident::planner
