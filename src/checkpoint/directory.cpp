#include "checkpoint/directory.hpp"

#include <fmt/format.h>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/manifest.hpp"

namespace trident::ckpt {

std::vector<StoredCheckpoint> scan_checkpoints(const std::string& dir) {
  std::vector<StoredCheckpoint> out;
  for (const auto& path : list_checkpoints(dir)) {
    StoredCheckpoint c;
    c.path = path;
    const std::string name = path.substr(path.rfind("step_") + 5);
    c.name_step = std::stoll(name.substr(0, name.size() - 3));
    c.content_step = manifest_step(path);
    out.push_back(std::move(c));
  }
  return out;
}

std::string stray_reason(const StoredCheckpoint& c) {
  return fmt::format("{} is named step {} but holds step {} (a renamed or stray copy)", c.path, c.name_step,
                     c.content_step.value_or(-1));
}

}  // namespace trident::ckpt
