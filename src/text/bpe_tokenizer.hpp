#pragma once
// GPT-2's byte-level BPE. Encoding: text (well-formed UTF-8) -> pre-tokenizer pieces
// (text/pretokenizer.hpp) -> each piece's bytes as single-byte tokens -> repeatedly merge the
// adjacent pair of lowest merge rank (the leftmost among equals) until no pair has a merge. A piece's
// tokens are cached, so repeated words cost one lookup. Decoding concatenates the tokens' bytes.
// Special tokens (<|endoftext|> = 50256 in GPT-2) are never produced from text: a document's
// "<|endoftext|>" is encoded as ordinary text (tiktoken's encode_ordinary).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/bpe_vocabulary.hpp"
#include "text/pretokenizer.hpp"

namespace trident::text {

class BpeTokenizer {
 public:
  // Throws trident::Error (naming vocabulary.source) when a byte has no single-byte token, a merge
  // names a token out of range, or two merges have the same pair.
  explicit BpeTokenizer(BpeVocabulary vocabulary);

  // Appends the tokens of `text`, which must be well-formed UTF-8 (text/utf8.hpp repairs input).
  // Not thread-safe (the word cache and scratch buffers): one tokenizer per thread.
  void encode(std::string_view text, std::vector<uint32_t>& out);
  // The bytes of `tokens`; throws trident::Error for an id out of range.
  std::string decode(const std::vector<uint32_t>& tokens) const;

  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }
  // The id of a token given by its bytes (e.g. "<|endoftext|>"); throws trident::Error when absent.
  uint32_t token_id(std::string_view bytes) const;

 private:
  struct MergeResult {
    uint32_t rank, merged;
  };
  const MergeResult* find_merge(uint32_t left, uint32_t right) const;
  // Appends the BPE tokens of one pre-tokenizer piece.
  void merge_piece(std::string_view piece, std::vector<uint32_t>& out);

  std::vector<std::string> tokens_;
  std::string source_;
  uint32_t byte_token_[256];
  std::unordered_map<uint64_t, MergeResult> merges_;  // key: left << 32 | right
  Pretokenizer pretokenizer_;

  // The tokens of pieces seen before: cache_[piece] = (offset, count) in cached_tokens_. Emptied
  // when it grows past a bound, so memory stays flat on any input.
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>> cache_;
  std::vector<uint32_t> cached_tokens_;
  std::string key_;
  // Scratch of encode() and merge_piece(), kept to avoid allocations.
  std::vector<std::string_view> pieces_;
  struct Symbol {
    uint32_t token;
    int32_t prev, next;  // neighbours in the piece (-1: none); a merged-away symbol has token ~0u
  };
  std::vector<Symbol> symbols_;
  struct Candidate {
    uint32_t rank;
    int32_t left, right;
  };
  std::vector<Candidate> heap_;
};

}  // namespace trident::text
