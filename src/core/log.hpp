#pragma once
// Logging: rank 0 speaks for the job; other ranks log only what is their own (warnings, errors),
// and then every line carries the rank.
#include <spdlog/spdlog.h>

namespace trident::log {

// Sets the pattern and level for this rank. Call once after MPI_Init. Every line goes to stderr, so
// that what a command prints on stdout (check, topology, plan --json) can be redirected cleanly;
// core/log_streams.hpp splits them for the commands whose output is their log.
void init(int world_rank, int world_size);

// True on the rank that prints job-wide information (world rank 0).
bool is_root();

// Job-wide information: printed by rank 0 only.
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (is_root()) spdlog::info(f, std::forward<Args>(args)...);
}

// Something this rank has to say: printed by whichever rank says it, tagged with its rank.
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  spdlog::warn(f, std::forward<Args>(args)...);
}

// A warning about the whole job that every rank reaches alike (the deck): printed by rank 0 only.
template <typename... Args>
void root_warn(fmt::format_string<Args...> f, Args&&... args) {
  if (is_root()) spdlog::warn(f, std::forward<Args>(args)...);
}

template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  spdlog::error(f, std::forward<Args>(args)...);
}

}  // namespace trident::log
