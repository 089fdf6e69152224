#include "core/log.hpp"

#include <fmt/format.h>

namespace trident::log {
namespace {
bool g_is_root = true;
}

void init(int world_rank, int world_size) {
  g_is_root = world_rank == 0;
  const std::string rank_tag =
      world_size > 1 ? fmt::format("[rank {}] ", world_rank) : std::string();
  spdlog::set_pattern(fmt::format("[%H:%M:%S.%e] [%^%l%$] {}%v", rank_tag));
}

bool is_root() { return g_is_root; }

}  // namespace trident::log
