#include "pipeline/schedule.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.hpp"

namespace trident {
namespace {

PipeOp interleaved_op(bool forward, int k, int pp, int v) {
  const int in_group = k % (pp * v);
  int chunk = in_group / pp;
  if (!forward) chunk = v - 1 - chunk;
  return {forward, chunk, (k / (pp * v)) * pp + k % pp};
}

}  // namespace

std::vector<PipeOp> build_schedule(Schedule schedule, int pp, int stage, int v, int m) {
  TRIDENT_CHECK(stage >= 0 && stage < pp && m >= 1 && v >= 1, "bad schedule request: pp {} stage {} v {} m {}", pp,
                stage, v, m);
  std::vector<PipeOp> ops;
  if (schedule == Schedule::GPipe) {
    TRIDENT_CHECK(v == 1, "gpipe runs one chunk per stage");
    for (int i = 0; i < m; ++i) ops.push_back({true, 0, i});
    for (int i = 0; i < m; ++i) ops.push_back({false, 0, i});
    return ops;
  }
  if (schedule == Schedule::OneFOneB) {
    TRIDENT_CHECK(v == 1, "1f1b runs one chunk per stage; use interleaved for virtual stages");
    const int warmup = std::min(pp - stage - 1, m);
    for (int i = 0; i < warmup; ++i) ops.push_back({true, 0, i});
    for (int i = 0; i < m - warmup; ++i) {
      ops.push_back({true, 0, warmup + i});
      ops.push_back({false, 0, i});
    }
    for (int i = m - warmup; i < m; ++i) ops.push_back({false, 0, i});
    return ops;
  }
  TRIDENT_CHECK(m % pp == 0, "interleaved needs micro-batches ({}) to be a multiple of pp ({})", m, pp);
  const int total = m * v;
  const int warmup = m == pp ? total : std::min((pp - stage - 1) * 2 + (v - 1) * pp, total);
  const int steady = total - warmup;
  for (int k = 0; k < warmup; ++k) ops.push_back(interleaved_op(true, k, pp, v));
  for (int i = 0; i < steady; ++i) {
    ops.push_back(interleaved_op(true, warmup + i, pp, v));
    ops.push_back(interleaved_op(false, i, pp, v));
  }
  for (int k = steady; k < total; ++k) ops.push_back(interleaved_op(false, k, pp, v));
  return ops;
}

std::vector<PipeOp> forward_only_schedule(int pp, int v, int m) {
  std::vector<PipeOp> ops;
  if (v == 1) {
    for (int i = 0; i < m; ++i) ops.push_back({true, 0, i});
    return ops;
  }
  for (int k = 0; k < m * v; ++k) ops.push_back(interleaved_op(true, k, pp, v));
  return ops;
}

int peak_in_flight(const std::vector<PipeOp>& ops) {
  int alive = 0, peak = 0;
  for (const auto& op : ops) {
    alive += op.forward ? 1 : -1;
    peak = std::max(peak, alive);
  }
  return peak;
}

std::string describe(const std::vector<PipeOp>& ops) {
  std::string s;
  for (const auto& op : ops) s += fmt::format("{}{}{}.{}", s.empty() ? "" : " ", op.forward ? 'F' : 'B', op.chunk,
                                              op.micro_batch);
  return s;
}

}  // namespace trident
