#pragma once
// Writes llm.c token shards (the format in data/dataset.hpp): PREFIX_SPLIT_NNNNNN.bin, each holding at
// most shard_tokens tokens. Shards are numbered across splits in the order written, as llm.c's
// scripts do (the validation shard first: PREFIX_val_000000.bin, then PREFIX_train_000001.bin, ...).
// Each shard is written beside its name and renamed into place when full (core/output_file.hpp).
#include <cstdint>
#include <string>
#include <vector>

namespace trident {

class LlmcShardWriter {
 public:
  // shard_tokens: 1 ... 2^31 - 1 (the header's count is an int32).
  LlmcShardWriter(std::string prefix, int64_t shard_tokens);

  // Starts a split ("val", "train"): the open shard, if any, is written first.
  void begin_split(const std::string& split);
  // Appends tokens to the current split (begin_split first); each id must be < 65536.
  void write(const uint32_t* tokens, size_t count);
  // Writes the open shard. Returns the paths of every shard written, in order.
  const std::vector<std::string>& finish();

 private:
  void flush_shard();

  std::string prefix_, split_;
  int64_t shard_tokens_;
  std::vector<uint16_t> shard_;
  std::vector<std::string> written_;
};

}  // namespace trident
