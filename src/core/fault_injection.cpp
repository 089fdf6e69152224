#include "core/fault_injection.hpp"

#include <array>
#include <charconv>
#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"

namespace trident::fault {
namespace {

constexpr std::array kPoints{kPipelineStage, kCheckpointCrash, kCheckpointStall, kSlowStep};
constexpr const char* kVariable = "TRIDENT_INJECT_FAULT";

struct Entry {
  std::string_view point, argument;
};

// "a:1,b:x" -> {a, 1}, {b, x}; an entry without ':' has an empty argument.
template <typename Visit>
void for_each_entry(std::string_view spec, Visit visit) {
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    const std::string_view entry = spec.substr(0, comma);
    const size_t colon = entry.find(':');
    visit(Entry{entry.substr(0, colon), colon == std::string_view::npos ? std::string_view{} : entry.substr(colon + 1)});
    if (comma == std::string_view::npos) break;
    spec.remove_prefix(comma + 1);
  }
}

}  // namespace

std::optional<std::string> armed(std::string_view point) {
  const char* spec = std::getenv(kVariable);
  if (!spec) return std::nullopt;
  std::optional<std::string> argument;
  for_each_entry(spec, [&](Entry e) {
    if (e.point == point) argument = std::string(e.argument);
  });
  return argument;
}

std::optional<int> armed_number(std::string_view point) {
  const std::optional<std::string> argument = armed(point);
  if (!argument) return std::nullopt;
  int value = -1;
  const char* end = argument->data() + argument->size();
  const auto [stop, ec] = std::from_chars(argument->data(), end, value);
  if (ec != std::errc() || stop != end || value < 0)
    throw Error(fmt::format("{}: the point '{}' takes a non-negative integer, not '{}'", kVariable, point, *argument));
  return value;
}

void check_environment() {
  const char* spec = std::getenv(kVariable);
  if (!spec) return;
  for_each_entry(spec, [&](Entry e) {
    bool known = false;
    for (std::string_view p : kPoints) known = known || p == e.point;
    if (!known)
      throw Error(fmt::format("{}={}: '{}' is not a fault injection point (known: {}; docs/testing.md)", kVariable, spec,
                              e.point, fmt::join(kPoints, ", ")));
    if (e.argument.empty())
      throw Error(fmt::format("{}={}: the point '{}' needs an argument (POINT:ARG)", kVariable, spec, e.point));
  });
}

}  // namespace trident::fault
