#include "checkpoint/manifest.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/checksum.hpp"
#include "core/regular_file.hpp"

namespace trident::ckpt {
namespace {

constexpr const char* kMagic = "trident-checkpoint-manifest 1\n";
constexpr char kHdf5Signature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};

// A file opened with POSIX calls: nothing here interprets HDF5 structures.
class RawFile {
 public:
  RawFile(const std::string& path, bool writable) : path_(path) {
    if (!writable) {  // a checkpoint a user names may be anything: a FIFO must not block the open
      try {
        fd_ = open_regular_file(path);
      } catch (const Error& e) {
        throw CheckpointError(e.what());
      }
      return;
    }
    fd_ = ::open(path.c_str(), O_RDWR);
    if (fd_ < 0) throw CheckpointError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  }
  ~RawFile() { ::close(fd_); }
  RawFile(const RawFile&) = delete;
  RawFile& operator=(const RawFile&) = delete;

  int64_t size() const {
    const off_t end = ::lseek(fd_, 0, SEEK_END);
    if (end < 0) throw CheckpointError(fmt::format("{}: cannot read its size: {}", path_, std::strerror(errno)));
    return int64_t(end);
  }
  // Up to n bytes at offset (fewer at the end of the file).
  std::string read(int64_t offset, int64_t n) const {
    std::string buf(size_t(n), '\0');
    int64_t done = 0;
    while (done < n) {
      const ssize_t r = ::pread(fd_, buf.data() + done, size_t(n - done), off_t(offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) throw CheckpointError(fmt::format("{}: cannot read: {}", path_, std::strerror(errno)));
      if (r == 0) break;
      done += r;
    }
    buf.resize(size_t(done));
    return buf;
  }
  void write(int64_t offset, const std::string& data) const {
    if (::pwrite(fd_, data.data(), data.size(), off_t(offset)) != ssize_t(data.size()))
      throw CheckpointError(fmt::format("{}: cannot write the manifest: {}", path_, std::strerror(errno)));
  }
  void sync() const {
    if (::fsync(fd_) != 0) throw CheckpointError(fmt::format("{}: cannot fsync: {}", path_, std::strerror(errno)));
  }

 private:
  std::string path_;
  int fd_ = -1;
};

uint64_t hash_bytes(const std::string& bytes, int64_t first_offset) {
  uint64_t sum = 0;
  for (size_t k = 0; k < bytes.size(); ++k) sum += element_hash(uint64_t(first_offset) + k, uint8_t(bytes[k]));
  return sum;
}

uint64_t hash_range(const RawFile& f, int64_t begin, int64_t end) {
  constexpr int64_t kChunk = 4 << 20;
  uint64_t sum = 0;
  for (int64_t pos = begin; pos < end; pos += kChunk) sum += hash_bytes(f.read(pos, std::min(kChunk, end - pos)), pos);
  return sum;
}

// Every byte of [user_block, size) outside the (sorted, disjoint) data extents.
uint64_t metadata_checksum(const RawFile& f, int64_t user_block, int64_t size, const std::vector<Extent>& data) {
  uint64_t sum = 0;
  int64_t pos = user_block;
  for (const Extent& e : data) {
    if (e.offset > pos) sum += hash_range(f, pos, e.offset);
    pos = std::max(pos, e.offset + e.bytes);
  }
  return sum + hash_range(f, pos, size);
}

std::vector<Extent> sorted_and_merged(std::vector<Extent> data) {
  std::sort(data.begin(), data.end(), [](const Extent& a, const Extent& b) { return a.offset < b.offset; });
  std::vector<Extent> out;
  for (const Extent& e : data) {
    if (e.bytes <= 0) continue;
    if (!out.empty() && e.offset <= out.back().offset + out.back().bytes)
      out.back().bytes = std::max(out.back().bytes, e.offset + e.bytes - out.back().offset);
    else
      out.push_back(e);
  }
  return out;
}

std::string render(const Manifest& m) {
  nlohmann::json j;
  j["step"] = m.step;
  j["file_size"] = m.file_size;
  j["user_block"] = m.user_block;
  j["data"] = nlohmann::json::array();
  for (const Extent& e : m.data) j["data"].push_back({e.offset, e.bytes});
  j["metadata_checksum"] = fmt::format("{:016x}", m.metadata_checksum);
  const std::string body = std::string(kMagic) + j.dump() + "\n";
  return body + fmt::format("checksum {:016x}\n", hash_bytes(body, 0));
}

// The manifest in the user block `block`; throws CheckpointError (naming `path`) when it is not one
// or its checksum does not match.
Manifest parse(const std::string& block, const std::string& path) {
  const std::string refused = fmt::format("{}: damaged checkpoint: its manifest (the first bytes of the file) ", path);
  if (block.rfind(kMagic, 0) != 0)
    throw CheckpointError(refused + "is missing or damaged; not a trident checkpoint, or damaged at its start");
  const size_t json_end = block.find('\n', std::strlen(kMagic));
  const size_t sum_end = json_end == std::string::npos ? json_end : block.find('\n', json_end + 1);
  if (sum_end == std::string::npos) throw CheckpointError(refused + "is cut short");
  const std::string body = block.substr(0, json_end + 1);
  const std::string sum_line = block.substr(json_end + 1, sum_end - json_end - 1);
  if (sum_line != fmt::format("checksum {:016x}", hash_bytes(body, 0)))
    throw CheckpointError(refused + "does not match its checksum");
  Manifest m;
  try {
    const auto j = nlohmann::json::parse(body.substr(std::strlen(kMagic)));
    m.step = j.at("step").get<int64_t>();
    m.file_size = j.at("file_size").get<int64_t>();
    m.user_block = j.at("user_block").get<int64_t>();
    for (const auto& e : j.at("data")) m.data.push_back({e.at(0).get<int64_t>(), e.at(1).get<int64_t>()});
    m.metadata_checksum = std::stoull(j.at("metadata_checksum").get<std::string>(), nullptr, 16);
  } catch (const std::exception& e) {
    throw CheckpointError(refused + "cannot be parsed: " + e.what());
  }
  int64_t pos = m.user_block;
  for (const Extent& e : m.data) {
    if (e.offset < pos || e.bytes < 0 || e.offset + e.bytes > m.file_size)
      throw CheckpointError(refused + "lists data outside the file");
    pos = e.offset + e.bytes;
  }
  return m;
}

// The start of the file up to the manifest's checksum line (or what there is of it).
std::string manifest_text(const RawFile& f) {
  for (int64_t n = 4096;; n *= 2) {
    const std::string block = f.read(0, n);
    if (std::count(block.begin(), block.end(), '\n') >= 3 || int64_t(block.size()) < n || n >= (64 << 20)) return block;
  }
}

}  // namespace

int64_t user_block_bytes(int64_t n_datasets) {
  // "[offset,bytes]," is at most 42 characters; the rest of the manifest is under 512.
  const int64_t need = 512 + 42 * n_datasets;
  int64_t size = 4096;
  while (size < need) size *= 2;
  return size;
}

void seal_checkpoint(const std::string& path, int64_t step, int64_t user_block, std::vector<Extent> data) {
  RawFile f(path, true);
  Manifest m;
  m.step = step;
  m.file_size = f.size();
  m.user_block = user_block;
  m.data = sorted_and_merged(std::move(data));
  m.metadata_checksum = metadata_checksum(f, user_block, m.file_size, m.data);
  const std::string text = render(m);
  if (int64_t(text.size()) > user_block)
    throw CheckpointError(fmt::format("{}: the manifest ({} bytes) does not fit the user block ({} bytes)", path,
                                      text.size(), user_block));
  f.write(0, text);
  f.sync();
}

std::optional<Manifest> verify_manifest(const std::string& path) {
  RawFile f(path, false);
  if (f.read(0, 8) == std::string(kHdf5Signature, 8)) return std::nullopt;
  const std::string text = manifest_text(f);
  const Manifest m = parse(text, path);
  const std::string block = f.read(0, m.user_block);
  const size_t used = text.find('\n', text.find('\n', std::strlen(kMagic)) + 1) + 1;
  if (int64_t(block.size()) != m.user_block || block.find_first_not_of('\0', used) != std::string::npos)
    throw CheckpointError(fmt::format("{}: damaged checkpoint: the padding of its manifest is not zero", path));
  const int64_t size = f.size();
  if (size < m.file_size)
    throw CheckpointError(fmt::format("{}: truncated file: {} bytes, {} were written", path, size, m.file_size));
  if (size > m.file_size)
    throw CheckpointError(fmt::format("{}: damaged checkpoint: {} bytes, {} were written", path, size, m.file_size));
  const uint64_t actual = metadata_checksum(f, m.user_block, size, m.data);
  if (actual != m.metadata_checksum)
    throw CheckpointError(fmt::format("{}: damaged checkpoint: its HDF5 metadata (every byte outside the tensor data: "
                                      "structure, attributes, step) changed since it was written (checksum {:016x}, "
                                      "manifest {:016x})",
                                      path, actual, m.metadata_checksum));
  return m;
}

std::optional<int64_t> manifest_step(const std::string& path) {
  try {
    RawFile f(path, false);
    return parse(manifest_text(f), path).step;
  } catch (const CheckpointError&) {
    return std::nullopt;
  }
}

}  // namespace trident::ckpt
