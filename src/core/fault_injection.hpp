#pragma once
// Faults injected on purpose, for the failure tests: the one way a test makes a real `trident`
// process fail at a chosen point. The environment variable
//
//   TRIDENT_INJECT_FAULT=POINT:ARG[,POINT:ARG...]
//
// arms the named points (docs/testing.md lists them). Each point is read once, where the component
// that owns it is built, never in a loop; a name that is not a point is refused at start-up, so a
// typo cannot turn a failure test into a run that tests nothing.
#include <optional>
#include <string>
#include <string_view>

namespace trident::fault {

// The points, with the argument each takes.
inline constexpr std::string_view kPipelineStage = "pipeline-stage";      // N: stage N throws in its first backward
inline constexpr std::string_view kCheckpointCrash = "checkpoint-crash";  // before_rename | before_latest: _exit(86)
inline constexpr std::string_view kCheckpointStall = "checkpoint-stall";  // before_rename: block until killed
inline constexpr std::string_view kSlowStep = "slow-step";                // MS: every training step sleeps MS ms

// The argument of `point` when TRIDENT_INJECT_FAULT arms it in this process.
std::optional<std::string> armed(std::string_view point);

// armed(point) as a non-negative integer; throws trident::Error when the argument is not one.
std::optional<int> armed_number(std::string_view point);

// Throws trident::Error when TRIDENT_INJECT_FAULT names an unknown point or lacks an argument.
void check_environment();

}  // namespace trident::fault
