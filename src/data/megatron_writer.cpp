#include "data/megatron_writer.hpp"

#include <cstring>

#include "core/error.hpp"
#include "core/output_file.hpp"

namespace trident {
namespace {

constexpr char kIdxMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
constexpr uint64_t kIdxVersion = 1;
constexpr uint8_t kDtypeUint16 = 8, kDtypeInt32 = 4;

template <typename T>
void append_le(std::string& out, T value) {  // (x86-64 and aarch64 are little-endian)
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

}  // namespace

MegatronWriter::MegatronWriter(std::string prefix, int64_t vocab_size)
    : prefix_(std::move(prefix)),
      narrow_(vocab_size <= 65536),
      bin_(std::make_unique<AtomicFile>("Megatron .bin", prefix_ + ".bin")) {}

MegatronWriter::~MegatronWriter() = default;

void MegatronWriter::add_document(const uint32_t* tokens, size_t count) {
  TRIDENT_CHECK(count <= INT32_MAX, "a document of {} tokens is too long for a Megatron index (int32 sizes)", count);
  sizes_.push_back(static_cast<int32_t>(count));
  pointers_.push_back(bytes_);
  if (narrow_) {
    narrow_buffer_.assign(tokens, tokens + count);  // ids < 65536: the vocabulary is that small
    bin_->append(narrow_buffer_.data(), count * sizeof(uint16_t));
    bytes_ += static_cast<int64_t>(count * sizeof(uint16_t));
  } else {
    bin_->append(tokens, count * sizeof(uint32_t));
    bytes_ += static_cast<int64_t>(count * sizeof(uint32_t));
  }
}

std::vector<std::string> MegatronWriter::finish() {
  std::string idx(kIdxMagic, sizeof kIdxMagic);
  append_le<uint64_t>(idx, kIdxVersion);
  append_le<uint8_t>(idx, narrow_ ? kDtypeUint16 : kDtypeInt32);
  append_le<uint64_t>(idx, sizes_.size());
  append_le<uint64_t>(idx, sizes_.size() + 1);  // document index entries: documents + 1
  for (const int32_t size : sizes_) append_le(idx, size);
  for (const int64_t pointer : pointers_) append_le(idx, pointer);
  for (int64_t d = 0; d <= static_cast<int64_t>(sizes_.size()); ++d) append_le(idx, d);
  bin_->commit();
  write_file_atomically("Megatron .idx", prefix_ + ".idx", idx);
  return {prefix_ + ".bin", prefix_ + ".idx"};
}

}  // namespace trident
