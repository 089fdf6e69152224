#pragma once
// The tokenizer files a Hugging Face model directory holds beside its weights, for `ckpt export`.
#include <string>
#include <vector>

#include "core/config.hpp"

namespace trident::text {

// For GPT-2's BPE: vocab.json and merges.txt (the built-in files, byte for byte), tokenizer_config.json
// (GPT2Tokenizer, <|endoftext|> as bos/eos/unk, model_max_length = seq_len) and generation_config.json
// (bos/eos id 50256). Bytes and none: nothing (Hugging Face has no tokenizer whose ids are raw bytes).
// Each file is written atomically; returns the names written.
std::vector<std::string> write_hf_tokenizer_files(const std::string& dir, Tokenizer tokenizer, int64_t seq_len);

}  // namespace trident::text
