#pragma once
// A read-only memory mapping of a whole file (POSIX mmap). Each MPI rank opens its own mapping; the
// kernel shares the pages between ranks on one node, so a dataset costs its size once per node.
#include <cstdint>
#include <string>

namespace trident {

class MappedFile {
 public:
  // Maps `path` read-only. Throws trident::Error naming the file when it cannot be opened, is not a
  // regular file or cannot be mapped. An empty file maps to size() == 0 and data() == nullptr.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Drops the resident pages of bytes [offset, offset + length) from this process (MADV_DONTNEED:
  // the mapping is read-only, so they are read again from the file if touched later).
  void release(int64_t offset, int64_t length) const;

 private:
  void unmap() noexcept;

  std::string path_;
  const uint8_t* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace trident
