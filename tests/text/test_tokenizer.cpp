// GPT-2's BPE against OpenAI's tiktoken (gpt2 encoding, an independent implementation with its own copy
// of the ranks) on the multilingual test corpus (tools/make_corpus.sh), decode(encode(x)) == x, the
// three ways of reading the vocabulary, and the errors of bad vocabulary files.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>

#include "core/error.hpp"
#include "text/bpe_tokenizer.hpp"
#include "text/gpt2_files.hpp"
#include "text/tokenizer_files.hpp"
#include "text_test_util.hpp"

namespace trident::text {
namespace {

using texttest::read_file;

struct TempDir {
  std::string path = test::make_temp_dir("trident-text");
  ~TempDir() { std::filesystem::remove_all(path); }
};

// The first difference of two token sequences, shown with its neighbourhood as text.
std::string first_difference(const BpeTokenizer& tok, const std::vector<uint32_t>& ours,
                             const std::vector<uint32_t>& expected) {
  size_t i = 0;
  while (i < ours.size() && i < expected.size() && ours[i] == expected[i]) ++i;
  if (i == ours.size() && i == expected.size()) return "";
  const auto window = [&](const std::vector<uint32_t>& ids) {
    std::string s;
    for (size_t k = i >= 3 ? i - 3 : 0; k < std::min(ids.size(), i + 4); ++k)
      s += fmt::format("{}{}=\"{}\" ", k == i ? ">" : "", ids[k], tok.decode({ids[k]}));
    return s;
  };
  return fmt::format("first difference at token {} of {} (tiktoken: {})\n  trident:  {}\n  tiktoken: {}", i,
                     ours.size(), expected.size(), window(ours), window(expected));
}

class Gpt2Tokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { tokenizer_ = new BpeTokenizer(gpt2_vocabulary()); }
  static void TearDownTestSuite() { delete tokenizer_; }
  static BpeTokenizer* tokenizer_;
};
BpeTokenizer* Gpt2Tokenizer::tokenizer_ = nullptr;

TEST_F(Gpt2Tokenizer, SameTokensAsTiktokenOnTheCorpus) {
  TempDir dir;
  const std::string corpus = texttest::make_corpus(dir.path);
  ASSERT_FALSE(corpus.empty());
  const std::string text = read_file(corpus);
  ASSERT_GE(text.size(), 1000000u) << "the corpus must be at least 1 MB";
  const std::vector<uint32_t> expected = texttest::tiktoken_ids("encode", corpus);
  ASSERT_FALSE(expected.empty());
  std::vector<uint32_t> ours;
  tokenizer_->encode(text, ours);
  EXPECT_EQ(first_difference(*tokenizer_, ours, expected), "");
  // Again with the piece cache full of the corpus' words: the same tokens.
  std::vector<uint32_t> again;
  tokenizer_->encode(text, again);
  EXPECT_TRUE(again == ours);
  EXPECT_TRUE(tokenizer_->decode(ours) == text) << "decode(encode(corpus)) differs from the corpus";
}

TEST_F(Gpt2Tokenizer, RoundTripsTextThatStressesThePieces) {
  const std::vector<std::string> texts = {
      "", " ", "\n", "a", "'s", "''s", "It's", " 's", "\t\t x", std::string(5000, ' ') + "x", std::string(20000, 'a'),
      "1234567890123456789012345678901234567890", "\u00a0\u3000\u2028\u0085x", "e\u0301\u0302\u0303",
      "\U0001F469\u200D\U0001F469\u200D\U0001F467 \U0001F1EF\U0001F1F5", "<|endoftext|>", "\uFFFD\uFFFD",
      std::string("\0x\0", 3)};
  for (const std::string& text : texts) {
    std::vector<uint32_t> ids;
    tokenizer_->encode(text, ids);
    EXPECT_EQ(tokenizer_->decode(ids), text) << "text of " << text.size() << " bytes";
    EXPECT_EQ(ids.empty(), text.empty());
  }
}

TEST_F(Gpt2Tokenizer, EndOfTextInTextIsOrdinaryText) {
  EXPECT_EQ(tokenizer_->token_id("<|endoftext|>"), 50256u);
  std::vector<uint32_t> ids;
  tokenizer_->encode("<|endoftext|>", ids);
  EXPECT_GT(ids.size(), 1u);  // pieces "<|", "endoftext", "|>": never the special token
  for (const uint32_t id : ids) EXPECT_NE(id, 50256u);
}

TEST_F(Gpt2Tokenizer, DecodeRefusesAnIdOutOfRange) {
  EXPECT_THROW(tokenizer_->decode({50257}), Error);
}

TEST_F(Gpt2Tokenizer, VendoredFilesAndTokenizerJsonGiveTheSameTokens) {
  TempDir dir;
  const std::string vocab = std::string(TRIDENT_SOURCE_DIR) + "/third_party/gpt2/encoder.json";
  const std::string merges = std::string(TRIDENT_SOURCE_DIR) + "/third_party/gpt2/vocab.bpe";
  EXPECT_EQ(read_file(vocab), gpt2_encoder_json());
  EXPECT_EQ(read_file(merges), gpt2_vocab_bpe());

  // A Hugging Face tokenizer.json of the same vocabulary: merges in both of its spellings, and
  // <|endoftext|> as an added token.
  nlohmann::json vocab_object = nlohmann::json::parse(read_file(vocab));
  vocab_object.erase("<|endoftext|>");
  nlohmann::json merge_list = nlohmann::json::array();
  std::istringstream lines(read_file(merges));
  std::string line;
  std::getline(lines, line);  // #version
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    if (merge_list.size() % 2 == 0)
      merge_list.push_back(line);
    else
      merge_list.push_back({line.substr(0, space), line.substr(space + 1)});
  }
  const nlohmann::json tokenizer_json = {
      {"model", {{"type", "BPE"}, {"vocab", vocab_object}, {"merges", merge_list}}},
      {"added_tokens", {{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}}}}};
  test::write_file(dir.path + "/tokenizer.json", tokenizer_json.dump());

  BpeTokenizer from_files(read_vocab_and_merges(vocab, merges));
  BpeTokenizer from_json(read_tokenizer_json(dir.path + "/tokenizer.json"));
  const std::string text = "Tokenizers' files: vocab.json + merges.txt, or tokenizer.json \u2014 \u65e5\u672c 42!";
  std::vector<uint32_t> a, b, c;
  tokenizer_->encode(text, a);
  from_files.encode(text, b);
  from_json.encode(text, c);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
  EXPECT_EQ(from_json.vocab_size(), 50257);
  EXPECT_EQ(from_json.token_id("<|endoftext|>"), 50256u);
}

// The message of the Error thrown by body, or "" when none is.
template <typename F>
std::string error_of(F body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TokenizerFiles, ErrorsNameTheFileAndLine) {
  const std::string vocab = R"({"a": 0, "b": 1, "ab": 2})";
  // Not byte-level: no token for most bytes.
  EXPECT_NE(error_of([&] { BpeTokenizer(parse_vocab_and_merges(vocab, "v.json", "a b\n", "m.txt")); })
                .find("v.json + m.txt: no token for the byte 0x00"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_vocab_and_merges(vocab, "v.json", "#version: 0.2\na b\na c\n", "m.txt"); })
                .find("m.txt:3: merge \"a c\" names a token that is not in the vocabulary (c)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_vocab_and_merges(vocab, "v.json", "a b\nab\n", "m.txt"); })
                .find("m.txt:2: a merge is two tokens separated by one space"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_vocab_and_merges(R"({"a": 0, "b": 0})", "v.json", "", "m.txt"); })
                .find("v.json: id 0 is given to two tokens"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_vocab_and_merges(R"({"a": 0, "b": 5})", "v.json", "", "m.txt"); })
                .find("v.json: token \"b\" has id 5"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_vocab_and_merges("{\"\u4e00\": 0}", "v.json", "", "m.txt"); })
                .find("is not in GPT-2's byte-level alphabet"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_vocab_and_merges("{", "v.json", "", "m.txt"); }).find("v.json: not valid JSON"),
            std::string::npos);
  EXPECT_NE(error_of([] { read_vocab_and_merges("/nonexistent/vocab.json", "/nonexistent/merges.txt"); })
                .find("/nonexistent/vocab.json"),
            std::string::npos);
}

}  // namespace
}  // namespace trident::text
