#include "checkpoint/directory.hpp"

#include <fmt/format.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/directory_lock.hpp"
#include "checkpoint/format.hpp"
#include "checkpoint/manifest.hpp"
#include "core/error.hpp"
#include "core/regular_file.hpp"

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

namespace trident {

void check_checkpoint_dir(const std::string& dir) {
  const auto refuse = [&](const std::string& why) {
    throw Error(fmt::format("[checkpoint] dir = \"{}\" {}", dir, why));
  };
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) refuse(fmt::format("cannot be examined: {}", std::strerror(errno)));
    // Created at start-up: the nearest existing ancestor must be a directory this process can write.
    std::filesystem::path ancestor = std::filesystem::absolute(dir).parent_path();
    while (::stat(ancestor.c_str(), &st) != 0 && errno == ENOENT && ancestor.has_relative_path())
      ancestor = ancestor.parent_path();
    if (!S_ISDIR(st.st_mode))
      refuse(fmt::format("cannot be created: {} is {}, not a directory", ancestor.string(), file_type_name(st.st_mode)));
    if (::access(ancestor.c_str(), W_OK | X_OK) != 0)
      refuse(fmt::format("cannot be created: {} is not writable ({})", ancestor.string(), std::strerror(errno)));
    return;
  }
  if (!S_ISDIR(st.st_mode)) refuse(fmt::format("is {}, not a directory", file_type_name(st.st_mode)));
  if (::access(dir.c_str(), W_OK | X_OK) != 0) refuse(fmt::format("is not writable: {}", std::strerror(errno)));
  const std::string latest = dir + "/" + ckpt::kLatestName;
  if (::lstat(latest.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
    refuse(fmt::format("holds {} as {}: trident replaces that file after every checkpoint, so it must be a regular "
                       "file; remove it",
                       file_type_name(st.st_mode), latest));
  if (const auto owner = ckpt::live_lock_owner(dir))
    refuse(fmt::format("is in use by {}; two runs must not write one checkpoint directory", *owner));
}

}  // namespace trident
