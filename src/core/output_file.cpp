#include "core/output_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string_view>

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
int write_all(int fd, std::string_view text) {
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

AtomicFile::AtomicFile(std::string what, std::string path)
    : what_(std::move(what)), path_(std::move(path)), tmp_(path_ + ".tmp"), fd_(open_output(what_, tmp_, O_TRUNC)) {}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void AtomicFile::fail(int err) {
  ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  throw OutputError(what_, path_, err);
}

void AtomicFile::append(const void* data, size_t bytes) {
  const int err = write_all(fd_, std::string_view(static_cast<const char*>(data), bytes));
  if (err != 0) fail(err);
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) fail(errno);
  const int closed = ::close(fd_);
  fd_ = -1;
  if (closed != 0 || ::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    throw OutputError(what_, path_, err);
  }
  const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  const int dir = ::open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {  // the rename survives a crash once the directory is synced
    ::fsync(dir);
    ::close(dir);
  }
}

void write_file_atomically(const std::string& what, const std::string& path, const std::string& text) {
  AtomicFile file(what, path);
  file.append(text.data(), text.size());
  file.commit();
}

}  // namespace trident
