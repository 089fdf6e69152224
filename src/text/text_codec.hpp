#pragma once
// Text to token ids and back with the tokenizer a run was trained with (data.tokenizer): GPT-2's BPE,
// raw bytes, or none (ids only). For the commands that read or write text around a model: generate,
// the samples printed during training, multiple-choice evaluation.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.hpp"

namespace trident::text {

class BpeTokenizer;

class TextCodec {
 public:
  explicit TextCodec(Tokenizer tokenizer);
  ~TextCodec();
  TextCodec(TextCodec&&) noexcept;

  Tokenizer tokenizer() const { return tokenizer_; }
  // The ids of `text` (well-formed UTF-8 for gpt2; any bytes for bytes). Throws trident::Error for a
  // run without a tokenizer.
  std::vector<int32_t> encode(std::string_view text);
  // The text of `ids`: their bytes with ill-formed UTF-8 replaced by U+FFFD (a sample may stop inside
  // a character); for a run without a tokenizer the ids in decimal, separated by spaces.
  std::string decode(const std::vector<int32_t>& ids) const;
  // The end-of-text token (GPT-2's <|endoftext|>, 50256), where the tokenizer has one.
  std::optional<int32_t> end_of_text() const;

 private:
  Tokenizer tokenizer_;
  std::unique_ptr<BpeTokenizer> bpe_;
};

// "1, 2,3" -> {1, 2, 3}; throws trident::Error naming `what` for anything else or an id outside [0, vocab).
std::vector<int32_t> parse_token_ids(std::string_view list, int64_t vocab, const std::string& what);

}  // namespace trident::text
