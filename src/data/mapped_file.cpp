#include "data/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.hpp"
#include "core/fatal.hpp"
#include "core/regular_file.hpp"

namespace trident {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = open_regular_file(path);  // a FIFO or device is refused, never waited on
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw Error(fmt::format("cannot stat '{}': {}", path, std::strerror(err)));
  }
  size_ = static_cast<int64_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, static_cast<size_t>(size_), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throw Error(fmt::format("cannot memory-map '{}' ({} bytes): {}", path, size_, std::strerror(err)));
    }
    data_ = static_cast<const uint8_t*>(p);
    register_mapped_file(data_, static_cast<size_t>(size_), path.c_str());
  }
  ::close(fd);  // the mapping keeps the file open
}

MappedFile::~MappedFile() { unmap(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::release(int64_t offset, int64_t length) const {
  // Whole pages inside [offset, offset + length) only: a page shared with a neighbour stays.
  const int64_t page = ::sysconf(_SC_PAGESIZE);
  const int64_t first = (offset + page - 1) / page * page, last = std::min(offset + length, size_) / page * page;
  if (data_ && first < last)
    ::madvise(const_cast<uint8_t*>(data_) + first, static_cast<size_t>(last - first), MADV_DONTNEED);
}

void MappedFile::unmap() noexcept {
  if (data_) unregister_mapped_file(data_);
  if (data_) ::munmap(const_cast<uint8_t*>(data_), static_cast<size_t>(size_));
  data_ = nullptr;
  size_ = 0;
}

}  // namespace trident
