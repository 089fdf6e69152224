#include "train/op_profile_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace trident {

nlohmann::json op_profile_json(const ProfiledKernels& profile, int rank, int64_t steps, double step_ms) {
  nlohmann::json ops = nlohmann::json::array();
  const double per_step = 1.0 / double(std::max<int64_t>(steps, 1));
  for (const auto& row : profile.rows()) {
    nlohmann::json op = {{"op", row.op},
                         {"calls", row.calls},
                         {"total_ms", row.seconds * 1e3},
                         {"ms_per_step", row.seconds * 1e3 * per_step},
                         {"calls_per_step", double(row.calls) * per_step}};
    if (row.flops > 0) {  // GEMMs and attention: their FLOPs and rate (the wait in each call included)
      op["flop_per_call"] = row.flops / double(row.calls);
      op["tflop_per_s"] = row.seconds > 0 ? row.flops / row.seconds * 1e-12 : 0.0;
    }
    ops.push_back(std::move(op));
  }
  return {{"rank", rank}, {"steps", steps}, {"step_ms", step_ms}, {"fence_ms", profile.fence_seconds() * 1e3},
          {"ops", ops}};
}

std::string format_op_profile(const nlohmann::json& p, int lines) {
  const auto& ops = p.at("ops");
  double sum_ms = 0, calls = 0;
  for (const auto& op : ops) {
    sum_ms += op.at("ms_per_step").get<double>();
    calls += op.at("calls_per_step").get<double>();
  }
  std::string out = fmt::format(
      "op profile of rank {} over {} step(s): the operations take {:.2f} ms a step ({:.0f} calls, each waited for: "
      "{:.3f} ms a wait included in each) against {:.2f} ms a profiled step",
      p.at("rank").get<int>(), p.at("steps").get<int64_t>(), sum_ms, calls, p.at("fence_ms").get<double>(),
      p.at("step_ms").get<double>());
  out += "\n   ms/step   share  calls/step   TFLOP/s  operation";
  int shown = 0;
  for (const auto& op : ops) {
    if (shown++ == lines) break;
    const double ms = op.at("ms_per_step").get<double>();
    const std::string rate = op.contains("tflop_per_s") ? fmt::format("{:8.2f}", op.at("tflop_per_s").get<double>())
                                                        : fmt::format("{:>8}", "-");
    out += fmt::format("\n  {:8.3f}  {:5.1f}%  {:10.1f}  {}  {}", ms, sum_ms > 0 ? 100 * ms / sum_ms : 0.0,
                       op.at("calls_per_step").get<double>(), rate, op.at("op").get<std::string>());
  }
  if (int(ops.size()) > lines) out += fmt::format("\n  ({} more in the JSON file)", ops.size() - size_t(lines));
  return out;
}

}  // namespace trident
