#pragma once
// GPT-2's pre-tokenisation: text is cut into pieces by OpenAI's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (contractions, letters, numbers, other symbols each with at most one leading space, and whitespace
// runs whose last space goes with the next word), and BPE runs inside each piece. Compiled with PCRE2
// in UTF mode with Unicode properties (PCRE2_UCP) and JIT. \s is written out as Unicode's White_Space
// set, which tiktoken's regex engine (Rust's fancy-regex) uses; PCRE2 10.42's \s (with UCP) leaves out U+0085.
// \p{L} and \p{N} follow PCRE2's Unicode tables (Unicode 14 in Debian 12's PCRE2 10.42; tiktoken's
// are newer, so characters assigned since then may be cut differently).
#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

namespace trident::text {

class Pretokenizer {
 public:
  Pretokenizer();
  ~Pretokenizer();
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;

  // Appends the pieces of `text`, in order; together they cover it exactly. `text` must be
  // well-formed UTF-8 (text/utf8.hpp): it is not checked again here. Not thread-safe (one match
  // buffer per object).
  void split(std::string_view text, std::vector<std::string_view>& pieces);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trident::text
