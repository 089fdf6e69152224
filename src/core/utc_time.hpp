#pragma once
// The current time as ISO 8601 UTC ("2026-11-26T14:22:29Z"), for what trident stamps into files
// (checkpoint headers, the checkpoint directory's lock, the CPU peak cache).
#include <ctime>
#include <string>

namespace trident {

inline std::string utc_timestamp() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace trident
