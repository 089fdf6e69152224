#include "text/hf_tokenizer_files.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>

#include "core/output_file.hpp"
#include "text/gpt2_files.hpp"

namespace trident::text {

std::vector<std::string> write_hf_tokenizer_files(const std::string& dir, Tokenizer tokenizer, int64_t seq_len) {
  if (tokenizer != Tokenizer::Gpt2) return {};
  constexpr const char* kEndOfText = "<|endoftext|>";
  constexpr int64_t kEndOfTextId = kGpt2VocabSize - 1;
  nlohmann::ordered_json config;
  config["tokenizer_class"] = "GPT2Tokenizer";
  config["model_max_length"] = seq_len;
  config["bos_token"] = kEndOfText;
  config["eos_token"] = kEndOfText;
  config["unk_token"] = kEndOfText;
  config["add_prefix_space"] = false;
  config["clean_up_tokenization_spaces"] = false;
  nlohmann::ordered_json generation;
  generation["bos_token_id"] = kEndOfTextId;
  generation["eos_token_id"] = kEndOfTextId;
  const std::vector<std::pair<std::string, std::string>> files = {
      {"vocab.json", std::string(gpt2_encoder_json())},
      {"merges.txt", std::string(gpt2_vocab_bpe())},
      {"tokenizer_config.json", config.dump(2) + "\n"},
      {"generation_config.json", generation.dump(2) + "\n"}};
  std::vector<std::string> names;
  for (const auto& [name, text] : files) {
    write_file_atomically("ckpt export", (std::filesystem::path(dir) / name).string(), text);
    names.push_back(name);
  }
  return names;
}

}  // namespace trident::text
