#include "core/output_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/regular_file.hpp"

namespace trident {
namespace {

// Opens an output for writing: O_NONBLOCK so that a FIFO without a reader fails (ENXIO) instead of
// waiting; anything but a regular file is refused.
int open_output(const std::string& what, const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | flags, 0644);
  if (fd < 0) throw OutputError(what, path, errno, "cannot open");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(fmt::format("{} = \"{}\" is {}, not a regular file", what, path, file_type_name(st.st_mode)));
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

// Writes all of `text` at the file's current offset; the errno of the failure, or 0.
int write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    done += size_t(n);
  }
  return 0;
}

}  // namespace

OutputError::OutputError(const std::string& what, const std::string& path, int err, const std::string& action)
    : Error(fmt::format("{}: {} {}: {} (errno {})", what, action, path, std::strerror(err), err)), err_(err) {}

bool OutputError::retryable() const {
  return err_ == ENOSPC || err_ == EDQUOT || err_ == EIO || err_ == ESTALE || err_ == ETIMEDOUT;
}

RecordFile::RecordFile(std::string what, std::string path, bool append)
    : what_(std::move(what)), path_(std::move(path)), fd_(open_output(what_, path_, append ? O_APPEND : O_TRUNC)) {}

RecordFile::~RecordFile() { ::close(fd_); }

void RecordFile::append(const std::string& record) {
  const off_t before = ::lseek(fd_, 0, SEEK_END);
  if (before < 0) throw OutputError(what_, path_, errno);
  const int err = write_all(fd_, record);
  if (err == 0) return;
  // No half line: a reader of the file (and a resumed run appending to it) sees whole records only.
  if (::ftruncate(fd_, before) != 0) {
    const int truncate_err = errno;
    throw OutputError(what_, path_, err,
                      fmt::format("cannot write (and cannot remove the partial record: {})", std::strerror(truncate_err)));
  }
  throw OutputError(what_, path_, err);
}

void write_file_atomically(const std::string& what, const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = open_output(what, tmp, O_TRUNC);
  int err = write_all(fd, text);
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    throw OutputError(what, path, err);
  }
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const int dir = ::open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {  // the rename survives a crash once the directory is synced
    ::fsync(dir);
    ::close(dir);
  }
}

}  // namespace trident
