#pragma once
// Reading a byte-level BPE vocabulary from the standard files:
//   vocab.json (OpenAI's encoder.json)   {"token": id, ...}, tokens in GPT-2's byte-level alphabet
//   merges.txt (OpenAI's vocab.bpe)      "#version: ..." then one "left right" merge per line, rank order
//   tokenizer.json (Hugging Face)        model.vocab and model.merges ("left right" or [left, right]),
//                                        added_tokens ({"id", "content"}) for tokens outside the vocab
// The byte-level alphabet writes each byte as a printable character: the printable Latin-1 bytes
// (0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF) as themselves, the other 68 bytes as U+0100, U+0101, ... in byte
// order (so a space is "Ġ", U+0120). Errors name the file and, for merges.txt, the line.
#include <string>
#include <string_view>

#include "text/bpe_vocabulary.hpp"

namespace trident::text {

BpeVocabulary read_vocab_and_merges(const std::string& vocab_json_path, const std::string& merges_path);
BpeVocabulary read_tokenizer_json(const std::string& path);

// GPT-2's own files (third_party/gpt2: encoder.json and vocab.bpe), built into the executable.
BpeVocabulary gpt2_vocabulary();

// The same from file contents; *_name says where they came from, for messages.
BpeVocabulary parse_vocab_and_merges(std::string_view vocab_json, const std::string& vocab_name,
                                     std::string_view merges, const std::string& merges_name);

}  // namespace trident::text
