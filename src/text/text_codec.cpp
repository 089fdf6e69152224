#include "text/text_codec.hpp"

#include <charconv>

#include "core/error.hpp"
#include "text/bpe_tokenizer.hpp"
#include "text/tokenizer_files.hpp"
#include "text/utf8.hpp"

namespace trident::text {

TextCodec::TextCodec(Tokenizer tokenizer) : tokenizer_(tokenizer) {
  if (tokenizer_ == Tokenizer::Gpt2) bpe_ = std::make_unique<BpeTokenizer>(gpt2_vocabulary());
}

TextCodec::~TextCodec() = default;
TextCodec::TextCodec(TextCodec&&) noexcept = default;

std::vector<int32_t> TextCodec::encode(std::string_view text) {
  std::vector<int32_t> ids;
  switch (tokenizer_) {
    case Tokenizer::Gpt2: {
      if (first_invalid_utf8(text) != text.size()) throw Error("the text is not well-formed UTF-8");
      std::vector<uint32_t> tokens;
      bpe_->encode(text, tokens);
      ids.assign(tokens.begin(), tokens.end());
      break;
    }
    case Tokenizer::Bytes:
      for (const char c : text) ids.push_back(int32_t(static_cast<unsigned char>(c)));
      break;
    case Tokenizer::None:
      throw Error("the run has no tokenizer (data.tokenizer = \"none\"): give token ids instead of text");
  }
  return ids;
}

std::string TextCodec::decode(const std::vector<int32_t>& ids) const {
  std::string bytes;
  switch (tokenizer_) {
    case Tokenizer::Gpt2:
      bytes = bpe_->decode(std::vector<uint32_t>(ids.begin(), ids.end()));
      break;
    case Tokenizer::Bytes:
      for (const int32_t id : ids) bytes.push_back(static_cast<char>(id));
      break;
    case Tokenizer::None: {
      std::string out;
      for (const int32_t id : ids) out += (out.empty() ? "" : " ") + std::to_string(id);
      return out;
    }
  }
  std::string out;
  append_repaired_utf8(bytes, out);
  return out;
}

std::optional<int32_t> TextCodec::end_of_text() const {
  if (tokenizer_ == Tokenizer::Gpt2) return int32_t(bpe_->token_id("<|endoftext|>"));
  return std::nullopt;
}

std::vector<int32_t> parse_token_ids(std::string_view list, int64_t vocab, const std::string& what) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < list.size()) {
    while (i < list.size() && (list[i] == ' ' || list[i] == ',')) ++i;
    if (i == list.size()) break;
    int64_t id = -1;
    const auto [end, ec] = std::from_chars(list.data() + i, list.data() + list.size(), id);
    if (ec != std::errc() || id < 0 || id >= vocab || (end != list.data() + list.size() && *end != ',' && *end != ' '))
      throw Error(fmt::format("{}: \"{}\" is not a list of token ids in [0, {}) separated by commas", what, list, vocab));
    ids.push_back(int32_t(id));
    i = size_t(end - list.data());
  }
  if (ids.empty()) throw Error(fmt::format("{}: no token ids", what));
  return ids;
}

}  // namespace trident::text
