#include "core/regular_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace trident {
namespace {

[[noreturn]] void fail_errno(const std::string& path, int err) {
  throw Error(fmt::format("cannot open '{}': {}", path, std::strerror(err)));
}

[[noreturn]] void fail_not_regular(const std::string& path, mode_t mode) {
  throw Error(fmt::format("cannot open '{}': it is {}, not a regular file", path, file_type_name(mode)));
}

}  // namespace

std::string file_type_name(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

void require_regular_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail_errno(path, errno);
  if (!S_ISREG(st.st_mode)) fail_not_regular(path, st.st_mode);
}

int open_regular_file(const std::string& path) {
  require_regular_file(path);
  // O_NONBLOCK: a FIFO put in the file's place after the stat above returns at once instead of
  // waiting for a writer; fstat then refuses it. (It has no effect on regular files' reads.)
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) fail_errno(path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail_errno(path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail_not_regular(path, st.st_mode);
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

std::string read_small_file(const std::string& path, size_t max_bytes) {
  const int fd = open_regular_file(path);
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw Error(fmt::format("cannot read '{}': {}", path, std::strerror(err)));
    }
    if (n == 0) break;
    if (text.size() + size_t(n) > max_bytes) {
      ::close(fd);
      throw Error(fmt::format("'{}' is larger than the {} bytes such a file may hold", path, max_bytes));
    }
    text.append(buf, size_t(n));
  }
  ::close(fd);
  return text;
}

}  // namespace trident
