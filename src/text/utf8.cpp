#include "text/utf8.hpp"

#include <cstring>

namespace trident::text {
namespace {

// Length of the well-formed sequence at bytes[pos], or -(length of its maximal ill-formed subpart)
// (at least 1 byte) when none starts there. Table 3-7: the second byte's range depends on the lead.
int sequence_length(std::string_view bytes, size_t pos) {
  const auto at = [&](size_t i) { return static_cast<unsigned char>(bytes[i]); };
  const unsigned char lead = at(pos);
  if (lead < 0x80) return 1;
  int length = 0;
  unsigned char low = 0x80, high = 0xBF;  // range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;   // no overlong forms
    if (lead == 0xED) high = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;   // no overlong forms
    if (lead == 0xF4) high = 0x8F;  // nothing above U+10FFFF
  } else {
    return -1;  // C0, C1, F5..FF, or a continuation byte without a lead
  }
  for (int k = 1; k < length; ++k) {
    if (pos + k >= bytes.size()) return -k;
    const unsigned char c = at(pos + k);
    if (c < (k == 1 ? low : 0x80) || c > (k == 1 ? high : 0xBF)) return -k;
  }
  return length;
}

// Length of the ASCII run at bytes[pos], 8 bytes at a time.
size_t ascii_run(std::string_view bytes, size_t pos) {
  size_t i = pos;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, bytes.data() + i, 8);
    if (word & 0x8080808080808080ull) break;
  }
  while (i < bytes.size() && static_cast<unsigned char>(bytes[i]) < 0x80) ++i;
  return i - pos;
}

}  // namespace

size_t first_invalid_utf8(std::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    pos += ascii_run(bytes, pos);
    if (pos == bytes.size()) break;
    const int n = sequence_length(bytes, pos);
    if (n < 0) return pos;
    pos += static_cast<size_t>(n);
  }
  return bytes.size();
}

int64_t append_repaired_utf8(std::string_view bytes, std::string& out) {
  size_t pos = first_invalid_utf8(bytes);
  out.append(bytes.data(), pos);
  int64_t replaced = 0;
  while (pos < bytes.size()) {
    const int n = sequence_length(bytes, pos);
    if (n > 0) {
      out.append(bytes.data() + pos, static_cast<size_t>(n));
      pos += static_cast<size_t>(n);
    } else {
      out.append(kReplacementCharacter);
      ++replaced;
      pos += static_cast<size_t>(-n);
    }
    const size_t run = ascii_run(bytes, pos);
    out.append(bytes.data() + pos, run);
    pos += run;
  }
  return replaced;
}

}  // namespace trident::text
