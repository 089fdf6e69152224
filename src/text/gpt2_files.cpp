#include "text/gpt2_files.hpp"

// The assembler copies the files in (.incbin); TRIDENT_GPT2_DIR is set for this source by CMake, which
// also rebuilds it when the files change (OBJECT_DEPENDS). Hidden: not exported with trident's symbols.
#define TRIDENT_EMBED(name, file)                     \
  ".section .rodata\n"                                \
  ".global " #name "\n.hidden " #name "\n" #name ":\n" \
  ".incbin \"" TRIDENT_GPT2_DIR "/" file "\"\n"       \
  ".global " #name "_end\n.hidden " #name "_end\n" #name "_end:\n.previous\n"
asm(TRIDENT_EMBED(trident_gpt2_encoder_json, "encoder.json") TRIDENT_EMBED(trident_gpt2_vocab_bpe, "vocab.bpe"));
#undef TRIDENT_EMBED

extern "C" {
extern const char trident_gpt2_encoder_json[], trident_gpt2_encoder_json_end[];
extern const char trident_gpt2_vocab_bpe[], trident_gpt2_vocab_bpe_end[];
}

namespace trident::text {

std::string_view gpt2_encoder_json() {
  return {trident_gpt2_encoder_json, size_t(trident_gpt2_encoder_json_end - trident_gpt2_encoder_json)};
}

std::string_view gpt2_vocab_bpe() {
  return {trident_gpt2_vocab_bpe, size_t(trident_gpt2_vocab_bpe_end - trident_gpt2_vocab_bpe)};
}

}  // namespace trident::text
