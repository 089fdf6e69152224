#include "core/log.hpp"

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>

namespace trident::log {
namespace {
bool g_is_root = true;
}

void init(int world_rank, int world_size) {
  g_is_root = world_rank == 0;
  const std::string rank_tag =
      world_size > 1 ? fmt::format("[rank {}] ", world_rank) : std::string();
  // Logs go to stderr, so that what a command prints on stdout (check, topology, plan --json) can be
  // redirected cleanly.
  if (!spdlog::get("trident")) spdlog::set_default_logger(spdlog::stderr_color_mt("trident"));
  spdlog::set_pattern(fmt::format("[%H:%M:%S.%e] [%^%l%$] {}%v", rank_tag));
}

bool is_root() { return g_is_root; }

}  // namespace trident::log
