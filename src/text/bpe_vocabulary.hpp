#pragma once
// What a byte-level BPE tokenizer is made of, as read from its files (text/tokenizer_files.hpp):
// every token's bytes and the merges in rank order.
#include <cstdint>
#include <string>
#include <vector>

namespace trident::text {

struct BpeMerge {
  uint32_t left, right;  // the adjacent pair of tokens
  uint32_t merged;       // the token of their concatenated bytes
};

struct BpeVocabulary {
  std::vector<std::string> tokens;  // token id -> its bytes (not the byte-level display string)
  std::vector<BpeMerge> merges;     // rank order: merges[r] has rank r (lower merges first)
  std::string source;               // where it came from, for messages
};

}  // namespace trident::text
