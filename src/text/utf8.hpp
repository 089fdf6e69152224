#pragma once
// UTF-8 well-formedness (the Unicode standard's Table 3-7) and the repair of ill-formed input.
//
// Ill-formed bytes are replaced as Python's bytes.decode("utf-8", errors="replace") and the Unicode
// standard's "maximal subpart" practice (section 3.9, U+FFFD substitution) do: each maximal prefix of
// a well-formed sequence that cannot be completed, or each single byte that starts none, becomes
// one U+FFFD (EF BF BD). E.g. "61 F1 80 80 E1 80 C2 62 80 63 80 BF 64" ->
// "a \uFFFD \uFFFD \uFFFD b \uFFFD c \uFFFD \uFFFD d".
#include <cstdint>
#include <string>
#include <string_view>

namespace trident::text {

// The bytes of U+FFFD REPLACEMENT CHARACTER in UTF-8.
inline constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";

// Offset of the first ill-formed byte of `bytes`, or bytes.size() when all of it is well-formed.
size_t first_invalid_utf8(std::string_view bytes);

// Appends `bytes` to `out` with each maximal ill-formed subpart replaced by U+FFFD; returns the
// number of replacements (0: `bytes` was appended unchanged).
int64_t append_repaired_utf8(std::string_view bytes, std::string& out);

}  // namespace trident::text
