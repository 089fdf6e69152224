#include "text/pretokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string>

#include "core/error.hpp"

namespace trident::text {
namespace {

// Unicode's White_Space property (PropList.txt), as a character-class body.
#define TRIDENT_WHITE_SPACE "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" TRIDENT_WHITE_SPACE "\\p{L}\\p{N}]+"
    "|[" TRIDENT_WHITE_SPACE "]+(?![^" TRIDENT_WHITE_SPACE "])|[" TRIDENT_WHITE_SPACE "]+";
#undef TRIDENT_WHITE_SPACE

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

struct Pretokenizer::Impl {
  pcre2_code* code = nullptr;
  pcre2_match_data* match = nullptr;
  bool jit = false;
};

Pretokenizer::Pretokenizer() : impl_(std::make_unique<Impl>()) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kGpt2Pattern), PCRE2_ZERO_TERMINATED,
                              PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
  if (impl_->code == nullptr)
    TRIDENT_FAIL("the GPT-2 pre-tokenisation pattern does not compile at offset {}: {}", offset, pcre2_message(error));
  // Anchored: each piece starts where the last ended (see split). Without JIT (a PCRE2 built without it) the interpreter gives the same pieces, slower.
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
  impl_->match = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  if (impl_->match == nullptr) TRIDENT_FAIL("out of memory for PCRE2 match data");
}

Pretokenizer::~Pretokenizer() {
  pcre2_match_data_free(impl_->match);
  pcre2_code_free(impl_->code);
}

void Pretokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(impl_->match);
  size_t pos = 0;
  while (pos < text.size()) {
    const int rc = impl_->jit ? pcre2_jit_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK,
                                                impl_->match, nullptr)
                              : pcre2_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK,
                                            impl_->match, nullptr);
    // Every character is White_Space, a letter, a number or none of these, so a piece starts at every
    // position: a failed match, or one that skips bytes, is a bug.
    TRIDENT_CHECK(rc > 0 && ovector[0] == pos && ovector[1] > pos,
                  "pre-tokenisation found no piece at byte {} (PCRE2: {})", pos, rc > 0 ? "skipped bytes" : pcre2_message(rc));
    pieces.emplace_back(text.data() + pos, ovector[1] - pos);
    pos = ovector[1];
  }
}

}  // namespace trident::text
