#pragma once
// GPT-2's vocabulary files (third_party/gpt2), embedded in the executable at build time.
#include <string_view>

namespace trident::text {

std::string_view gpt2_encoder_json();
std::string_view gpt2_vocab_bpe();

}  // namespace trident::text
