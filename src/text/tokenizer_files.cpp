#include "text/tokenizer_files.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <unordered_map>

#include "core/error.hpp"
#include "core/regular_file.hpp"
#include "text/gpt2_files.hpp"

namespace trident::text {
namespace {

// Vocabulary files are a few MB; refuse anything absurdly larger before reading it.
constexpr size_t kMaxTokenizerFileBytes = size_t(256) << 20;

// Code point of the byte-level alphabet -> byte (-1: not in the alphabet). See the header.
std::array<int, 512> byte_level_alphabet() {
  std::array<int, 512> byte_of{};
  byte_of.fill(-1);
  int next_extra = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    byte_of[printable ? b : next_extra++] = b;
  }
  return byte_of;
}

// The bytes a byte-level token string stands for; throws naming `source` for a character outside the
// alphabet. `display` is UTF-8 (JSON strings are), with code points below U+0200.
std::string byte_level_to_bytes(const std::string& display, const std::string& source) {
  static const std::array<int, 512> byte_of = byte_level_alphabet();
  std::string bytes;
  for (size_t i = 0; i < display.size();) {
    const unsigned char c = static_cast<unsigned char>(display[i]);
    int code = -1;
    if (c < 0x80) {
      code = c;
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < display.size()) {
      code = (c & 0x1F) << 6 | (static_cast<unsigned char>(display[i + 1]) & 0x3F);
      i += 2;
    }
    if (code < 0 || code >= int(byte_of.size()) || byte_of[code] < 0)
      throw Error(fmt::format("{}: token \"{}\" is not in GPT-2's byte-level alphabet", source, display));
    bytes.push_back(static_cast<char>(byte_of[code]));
  }
  return bytes;
}

nlohmann::json parse_json(std::string_view text, const std::string& source) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(fmt::format("{}: not valid JSON: {}", source, e.what()));
  }
}

// Token ids of a {"token": id} object, checked to be 0..n-1 each once.
struct VocabularyBuilder {
  BpeVocabulary vocab;
  std::unordered_map<std::string, uint32_t> id_of_display;  // the byte-level strings, as the merges name them

  void add_vocab_object(const nlohmann::json& object, const std::string& source) {
    if (!object.is_object()) throw Error(fmt::format("{}: the vocabulary is not a JSON object", source));
    vocab.tokens.resize(object.size());
    std::vector<bool> seen(object.size());
    for (const auto& [display, id_json] : object.items()) {
      if (!id_json.is_number_unsigned() || id_json.get<uint64_t>() >= object.size())
        throw Error(fmt::format("{}: token \"{}\" has id {}: ids must be 0 ... {} (one per token)", source, display,
                                id_json.dump(), object.size() - 1));
      const auto id = id_json.get<uint32_t>();
      if (seen[id]) throw Error(fmt::format("{}: id {} is given to two tokens (\"{}\" is the second)", source, id, display));
      seen[id] = true;
      vocab.tokens[id] = byte_level_to_bytes(display, source);
      id_of_display.emplace(display, id);
    }
  }

  // A merge given by the two byte-level strings; `where` names it in messages (file:line).
  void add_merge(const std::string& left, const std::string& right, const std::string& where) {
    const auto l = id_of_display.find(left), r = id_of_display.find(right), m = id_of_display.find(left + right);
    if (l == id_of_display.end() || r == id_of_display.end() || m == id_of_display.end())
      throw Error(fmt::format("{}: merge \"{} {}\" names a token that is not in the vocabulary ({})", where, left,
                              right, l == id_of_display.end() ? left : r == id_of_display.end() ? right : left + right));
    vocab.merges.push_back({l->second, r->second, m->second});
  }
};

}  // namespace

BpeVocabulary parse_vocab_and_merges(std::string_view vocab_json, const std::string& vocab_name,
                                     std::string_view merges, const std::string& merges_name) {
  VocabularyBuilder builder;
  builder.add_vocab_object(parse_json(vocab_json, vocab_name), vocab_name);
  size_t line_number = 0;
  for (size_t pos = 0; pos < merges.size();) {
    size_t end = merges.find('\n', pos);
    if (end == std::string_view::npos) end = merges.size();
    std::string_view line = merges.substr(pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_number == 1 && line.substr(0, 9) == "#version:")) continue;
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos)
      throw Error(fmt::format("{}:{}: a merge is two tokens separated by one space, not \"{}\"", merges_name,
                              line_number, line));
    builder.add_merge(std::string(line.substr(0, space)), std::string(line.substr(space + 1)),
                      fmt::format("{}:{}", merges_name, line_number));
  }
  builder.vocab.source = vocab_name + " + " + merges_name;
  return std::move(builder.vocab);
}

BpeVocabulary read_vocab_and_merges(const std::string& vocab_json_path, const std::string& merges_path) {
  const std::string vocab = read_small_file(vocab_json_path, kMaxTokenizerFileBytes);  // (read first: the first
  const std::string merges = read_small_file(merges_path, kMaxTokenizerFileBytes);     //  missing file is named)
  return parse_vocab_and_merges(vocab, vocab_json_path, merges, merges_path);
}

BpeVocabulary read_tokenizer_json(const std::string& path) {
  const nlohmann::json root = parse_json(read_small_file(path, kMaxTokenizerFileBytes), path);
  const auto model = root.find("model");
  if (model == root.end() || !model->is_object() || model->value("type", std::string("BPE")) != "BPE" ||
      !model->contains("vocab") || !model->contains("merges"))
    throw Error(fmt::format("{}: not a Hugging Face BPE tokenizer (no model of type \"BPE\" with vocab and merges)", path));
  VocabularyBuilder builder;
  builder.add_vocab_object(model->at("vocab"), path);
  const nlohmann::json& merges = model->at("merges");
  if (!merges.is_array()) throw Error(fmt::format("{}: model.merges is not an array", path));
  for (size_t i = 0; i < merges.size(); ++i) {
    const nlohmann::json& m = merges[i];
    const std::string where = fmt::format("{}: model.merges[{}]", path, i);
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        throw Error(fmt::format("{}: \"{}\" is not two tokens separated by one space", where, s));
      builder.add_merge(s.substr(0, space), s.substr(space + 1), where);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      builder.add_merge(m[0].get<std::string>(), m[1].get<std::string>(), where);
    } else {
      throw Error(fmt::format("{}: a merge is \"left right\" or [\"left\", \"right\"], not {}", where, m.dump()));
    }
  }
  // Added tokens (special tokens such as <|endoftext|>) are raw text, and may lie outside model.vocab.
  for (const nlohmann::json& added : root.value("added_tokens", nlohmann::json::array())) {
    if (!added.is_object() || !added.contains("id") || !added.contains("content") || !added["id"].is_number_unsigned() ||
        !added["content"].is_string())
      throw Error(fmt::format("{}: an added_tokens entry needs an id and a content: {}", path, added.dump()));
    const auto id = added["id"].get<uint64_t>();
    auto& tokens = builder.vocab.tokens;
    if (id < tokens.size()) {
      if (tokens[id] != added["content"].get<std::string>())
        throw Error(fmt::format("{}: added token {} is \"{}\" but the vocabulary has another token at that id", path,
                                id, added["content"].get<std::string>()));
    } else if (id == tokens.size()) {
      tokens.push_back(added["content"].get<std::string>());
    } else {
      throw Error(fmt::format("{}: added token id {} leaves a gap after the vocabulary of {}", path, id, tokens.size()));
    }
  }
  builder.vocab.source = path;
  return std::move(builder.vocab);
}

BpeVocabulary gpt2_vocabulary() {
  return parse_vocab_and_merges(gpt2_encoder_json(), "GPT-2 encoder.json (built in)", gpt2_vocab_bpe(),
                                "GPT-2 vocab.bpe (built in)");
}

}  // namespace trident::text
