#pragma once
// runtime.op_profile's report: a rank's table of time per backend operation (kernels/profiled_kernels.hpp)
// as JSON, and the lines the log shows of it.
#include <nlohmann/json.hpp>

#include <string>

#include "profiled_kernels.hpp"

namespace trident {

// {"rank", "steps", "step_ms" (the measured steps' mean), "fence_ms", "ops": [{"op", "calls", "total_ms",
// "ms_per_step", "calls_per_step"}, ...] by descending time}.
nlohmann::json op_profile_json(const ProfiledKernels& profile, int rank, int64_t steps, double step_ms);

// The top `lines` operations of one rank's JSON, with the sum over all of them against the measured step.
std::string format_op_profile(const nlohmann::json& rank_profile, int lines);

}  // namespace trident
