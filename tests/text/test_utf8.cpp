// UTF-8 repair against the Unicode standard's own examples (section 3.9, "U+FFFD Substitution of
// Maximal Subparts", Tables 3-8 to 3-11), which Python's errors="replace" follows.
#include <gtest/gtest.h>

#include "text/utf8.hpp"

namespace trident::text {
namespace {

std::string repaired(const std::string& bytes, int64_t expected_replacements) {
  std::string out;
  EXPECT_EQ(append_repaired_utf8(bytes, out), expected_replacements) << "input of " << bytes.size() << " bytes";
  return out;
}

const std::string R(kReplacementCharacter);

TEST(Utf8, WellFormedTextIsUnchanged) {
  const std::string text = "plain ASCII, caf\u00e9, \u65e5\u672c\u8a9e, \U0001F600, e\u0301, \uFFFD itself";
  EXPECT_EQ(first_invalid_utf8(text), text.size());
  EXPECT_EQ(repaired(text, 0), text);
  EXPECT_EQ(first_invalid_utf8(""), 0u);
}

TEST(Utf8, MaximalSubpartsOfTable3_8) {  // Unicode 15, Table 3-8: truncated sequences
  EXPECT_EQ(repaired("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64", 6),
            "a" + R + R + R + "b" + R + "c" + R + R + "d");
  EXPECT_EQ(first_invalid_utf8("\x61\xF1\x80\x80\xE1\x80\xC2\x62"), 1u);
}

TEST(Utf8, EachByteOfNonShortestFormsAndSurrogates) {  // Tables 3-9 and 3-10
  EXPECT_EQ(repaired("\xC0\xAF\xE0\x80\xBF\xF0\x81\x82\x41", 8), R + R + R + R + R + R + R + R + "A");
  EXPECT_EQ(repaired("\xED\xA0\x80\xED\xBF\xBF\xED\xAF\x41", 8), R + R + R + R + R + R + R + R + "A");
}

TEST(Utf8, OutOfRangeAndInvalidLeadBytes) {  // Table 3-11 and bytes that never occur
  EXPECT_EQ(repaired("\xF4\x91\x92\x93\xFF\x41\x80\xBF\x42", 7), R + R + R + R + R + "A" + R + R + "B");
  EXPECT_EQ(repaired("\xC1\xBF\xF5\xF8", 4), R + R + R + R);
}

TEST(Utf8, TruncatedAtTheEnd) {
  EXPECT_EQ(repaired("ok \xE2\x82", 1), "ok " + R);
  EXPECT_EQ(first_invalid_utf8("ok \xE2\x82"), 3u);
  EXPECT_EQ(repaired("\xF0\x9F\x98", 1), R);
}

TEST(Utf8, LongAsciiRunsAroundAnError) {  // the 8-byte fast path meets an error at every alignment
  for (size_t at = 0; at < 24; ++at) {
    std::string bytes(40, 'x');
    bytes[at] = '\x80';
    EXPECT_EQ(first_invalid_utf8(bytes), at);
    std::string expected(40, 'x');
    expected.replace(at, 1, R);
    EXPECT_EQ(repaired(bytes, 1), expected);
  }
}

}  // namespace
}  // namespace trident::text
