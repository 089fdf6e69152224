#include "data/llmc_writer.hpp"

#include <array>

#include "core/error.hpp"
#include "core/output_file.hpp"
#include "data/dataset.hpp"

namespace trident {
namespace {

constexpr int32_t kLlmcVersion = 1;
constexpr int kLlmcHeaderInts = 256;

}  // namespace

LlmcShardWriter::LlmcShardWriter(std::string prefix, int64_t shard_tokens)
    : prefix_(std::move(prefix)), shard_tokens_(shard_tokens) {
  TRIDENT_CHECK(shard_tokens >= 1 && shard_tokens <= INT32_MAX, "llm.c shard size {} is not in 1 ... 2^31 - 1",
                shard_tokens);
}

void LlmcShardWriter::begin_split(const std::string& split) {
  flush_shard();
  split_ = split;
}

void LlmcShardWriter::write(const uint32_t* tokens, size_t count) {
  TRIDENT_CHECK(!split_.empty(), "llm.c shard writer: tokens written before begin_split");
  for (size_t i = 0; i < count; ++i) {
    if (tokens[i] > UINT16_MAX)
      throw Error(fmt::format("token id {} does not fit an llm.c shard (uint16): use --format megatron for "
                              "vocabularies over 65536 tokens", tokens[i]));
    shard_.push_back(static_cast<uint16_t>(tokens[i]));
    if (static_cast<int64_t>(shard_.size()) == shard_tokens_) flush_shard();
  }
}

const std::vector<std::string>& LlmcShardWriter::finish() {
  flush_shard();
  return written_;
}

void LlmcShardWriter::flush_shard() {
  if (shard_.empty()) return;
  const std::string path = fmt::format("{}_{}_{:06d}.bin", prefix_, split_, written_.size());
  std::array<int32_t, kLlmcHeaderInts> header{};
  header[0] = kLlmcMagic;
  header[1] = kLlmcVersion;
  header[2] = static_cast<int32_t>(shard_.size());
  AtomicFile file("llm.c shard", path);  // (little-endian: x86-64 and aarch64 write it as it is in memory)
  file.append(header.data(), sizeof header);
  file.append(shard_.data(), shard_.size() * sizeof(uint16_t));
  file.commit();
  written_.push_back(path);
  shard_.clear();
}

}  // namespace trident
