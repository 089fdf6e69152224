#include "checkpoint/durable_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "checkpoint/checkpoint_error.hpp"
#include "core/output_file.hpp"

namespace fs = std::filesystem;

namespace trident::ckpt {

std::string sys_error(const std::string& what, const std::string& path) {
  return fmt::format("{} '{}': {}", what, path, std::strerror(errno));
}

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) throw CheckpointError(sys_error("cannot open for fsync", path));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw CheckpointError(fmt::format("cannot fsync '{}': {}", path, std::strerror(err)));
}

void rename_path(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    throw CheckpointError(fmt::format("cannot rename '{}' to '{}': {}", from, to, std::strerror(errno)));
}

std::string dir_of(const std::string& file) {
  const fs::path p = fs::path(file).parent_path();
  return p.empty() ? std::string(".") : p.string();
}

void write_text_atomically(const std::string& path, const std::string& text) {
  try {
    write_file_atomically("checkpoint", path, text);
  } catch (const Error& e) {
    throw CheckpointError(e.what());
  }
}

}  // namespace trident::ckpt
