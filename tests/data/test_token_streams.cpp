// Token streams: llm.c shards (single and glob), Megatron indexed datasets, text; every corruption
// case gives a trident::Error naming the file and offset.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>

#include "data/dataset.hpp"
#include "data_test_util.hpp"

namespace trident {
namespace {

using datatest::error_of;
using datatest::llmc_bytes;
using datatest::TempDir;
using datatest::write_bytes;
using datatest::write_megatron;
using testing::HasSubstr;

std::vector<int32_t> read_all(const TokenStream& s, int64_t begin, int64_t count) {
  std::vector<int32_t> out(static_cast<size_t>(count), -1);
  s.read(begin, count, out.data());
  return out;
}

std::vector<int32_t> iota(int32_t from, int32_t to) {
  std::vector<int32_t> v(static_cast<size_t>(to - from));
  std::iota(v.begin(), v.end(), from);
  return v;
}

// ------------------------------------------------------------------------------------------------
// llm.c

TEST(Llmc, SingleShard) {
  TempDir dir;
  std::vector<uint16_t> tokens(300);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>((i * 7919) % 50257);
  const std::string path = dir / "train_000000.bin";
  write_bytes(path, llmc_bytes(tokens));
  auto s = open_token_stream(DataFormat::LlmC, path, 50257);
  ASSERT_EQ(s->size(), 300);
  auto all = read_all(*s, 0, 300);
  for (size_t i = 0; i < tokens.size(); ++i) ASSERT_EQ(all[i], tokens[i]) << i;
  auto tail = read_all(*s, 250, 50);
  EXPECT_EQ(tail, std::vector<int32_t>(all.begin() + 250, all.end()));
  EXPECT_TRUE(read_all(*s, 300, 0).empty());
  EXPECT_THAT(s->describe(), HasSubstr(path));
  EXPECT_THAT(s->describe(), HasSubstr("300 tokens"));
  // Reads past the end are refused.
  std::vector<int32_t> buf(10);
  EXPECT_THAT(error_of([&] { s->read(295, 10, buf.data()); }), HasSubstr("outside the stream"));
}

TEST(Llmc, GlobOfTwoShardsSortedAndConcatenated) {
  TempDir dir;
  std::vector<uint16_t> a(100), b(150);
  std::iota(a.begin(), a.end(), 0);
  std::iota(b.begin(), b.end(), 100);
  // Written in reverse order (and with a non-matching neighbour) to check the sort.
  write_bytes(dir / "fineweb_train_000002.bin", llmc_bytes(b));
  write_bytes(dir / "fineweb_train_000001.bin", llmc_bytes(a));
  write_bytes(dir / "fineweb_val_000000.bin", llmc_bytes({7, 7, 7}));
  auto s = open_token_stream(DataFormat::LlmC, dir / "fineweb_train_*.bin", 1000);
  ASSERT_EQ(s->size(), 250);
  EXPECT_EQ(read_all(*s, 0, 250), iota(0, 250));
  EXPECT_EQ(read_all(*s, 90, 20), iota(90, 110));  // across the shard boundary
  EXPECT_EQ(read_all(*s, 100, 1), iota(100, 101));
  EXPECT_EQ(read_all(*s, 249, 1), iota(249, 250));
  EXPECT_THAT(s->describe(), HasSubstr("2 files"));
}

TEST(Llmc, EmptyShardInGlobIsSkipped) {
  TempDir dir;
  write_bytes(dir / "s0.bin", llmc_bytes({1, 2, 3}));
  write_bytes(dir / "s1.bin", llmc_bytes({}));
  write_bytes(dir / "s2.bin", llmc_bytes({4, 5}));
  auto s = open_token_stream(DataFormat::LlmC, dir / "s?.bin", 10);
  ASSERT_EQ(s->size(), 5);
  EXPECT_EQ(read_all(*s, 0, 5), iota(1, 6));
  EXPECT_EQ(read_all(*s, 3, 2), iota(4, 6));
}

TEST(LlmcErrors, WrongMagic) {
  TempDir dir;
  const std::string path = dir / "bad.bin";
  write_bytes(path, llmc_bytes({1, 2, 3}, 20240521));
  const std::string msg = error_of([&] { open_token_stream(DataFormat::LlmC, path, 100); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("wrong magic 20240521 at byte offset 0"));
  EXPECT_THAT(msg, HasSubstr("20240520"));
}

TEST(LlmcErrors, WrongVersion) {
  TempDir dir;
  const std::string path = dir / "v2.bin";
  write_bytes(path, llmc_bytes({1, 2, 3}, 20240520, 2));
  const std::string msg = error_of([&] { open_token_stream(DataFormat::LlmC, path, 100); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("unsupported version 2 at byte offset 4"));
}

TEST(LlmcErrors, TruncatedHeader) {
  TempDir dir;
  const std::string path = dir / "short.bin";
  write_bytes(path, llmc_bytes({1, 2, 3}).substr(0, 100));
  const std::string msg = error_of([&] { open_token_stream(DataFormat::LlmC, path, 100); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("truncated"));
  EXPECT_THAT(msg, HasSubstr("100 bytes"));
}

TEST(LlmcErrors, TokenCountLargerThanFile) {
  TempDir dir;
  const std::string path = dir / "cut.bin";
  write_bytes(path, llmc_bytes(std::vector<uint16_t>(300, 5), 20240520, 1, 500));
  const std::string msg = error_of([&] { open_token_stream(DataFormat::LlmC, path, 100); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("declares 500 tokens"));
  EXPECT_THAT(msg, HasSubstr("room for 300 tokens"));
}

TEST(LlmcErrors, TrailingBytes) {
  TempDir dir;
  const std::string path = dir / "long.bin";
  write_bytes(path, llmc_bytes(std::vector<uint16_t>(300, 5), 20240520, 1, 200));
  const std::string msg = error_of([&] { open_token_stream(DataFormat::LlmC, path, 100); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("200 unexpected bytes after the 200 tokens"));
}

TEST(LlmcErrors, TokenIdNotBelowVocabIsCaughtWhenRead) {
  TempDir dir;
  std::vector<uint16_t> a(100, 1), b(100, 2);
  b[57] = 60000;
  write_bytes(dir / "s0.bin", llmc_bytes(a));
  const std::string bad = dir / "s1.bin";
  write_bytes(bad, llmc_bytes(b));
  auto s = open_token_stream(DataFormat::LlmC, dir / "s*.bin", 50257);  // opening does not scan
  std::vector<int32_t> buf(200);
  s->read(0, 157, buf.data());  // everything before the bad token is fine
  const std::string msg = error_of([&] { s->read(150, 10, buf.data()); });
  EXPECT_THAT(msg, HasSubstr(bad));
  EXPECT_THAT(msg, HasSubstr("token id 60000 at token offset 57"));
  EXPECT_THAT(msg, HasSubstr("byte offset 1138"));  // 1024 + 2*57
  EXPECT_THAT(msg, HasSubstr("token 157 of the stream"));
  EXPECT_THAT(msg, HasSubstr("50257"));
}

TEST(LlmcErrors, EmptyGlob) {
  TempDir dir;
  const std::string pattern = dir / "nothing_*.bin";
  const std::string msg = error_of([&] { open_token_stream(DataFormat::LlmC, pattern, 100); });
  EXPECT_THAT(msg, HasSubstr(pattern));
  EXPECT_THAT(msg, HasSubstr("matches no file"));
}

TEST(LlmcErrors, MissingFile) {
  TempDir dir;
  const std::string path = dir / "missing.bin";
  const std::string msg = error_of([&] { open_token_stream(DataFormat::LlmC, path, 100); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("No such file"));
}

TEST(LlmcErrors, BadShardInGlobIsNamed) {
  TempDir dir;
  write_bytes(dir / "s0.bin", llmc_bytes({1, 2, 3}));
  const std::string bad = dir / "s1.bin";
  write_bytes(bad, llmc_bytes({1, 2, 3}, 12345));
  const std::string msg = error_of([&] { open_token_stream(DataFormat::LlmC, dir / "s*.bin", 100); });
  EXPECT_THAT(msg, HasSubstr(bad));
  EXPECT_THAT(msg, HasSubstr("wrong magic"));
}

TEST(LlmcErrors, DirectoryIsNotAShard) {
  TempDir dir;
  const std::string msg = error_of([&] { open_token_stream(DataFormat::LlmC, dir.path, 100); });
  EXPECT_THAT(msg, HasSubstr(dir.path));
  EXPECT_THAT(msg, HasSubstr("not a regular file"));
}

// ------------------------------------------------------------------------------------------------
// Megatron

std::vector<std::vector<int64_t>> sample_docs(int64_t scale) {
  return {{1 * scale, 2 * scale, 3 * scale}, {}, {4 * scale, 5 * scale, 6 * scale, 7 * scale, 8 * scale}, {9 * scale},
          {10 * scale, 11 * scale}};
}

std::vector<int32_t> flatten(const std::vector<std::vector<int64_t>>& docs) {
  std::vector<int32_t> out;
  for (const auto& d : docs)
    for (int64_t t : d) out.push_back(static_cast<int32_t>(t));
  return out;
}

TEST(Megatron, Uint16SeveralDocumentsAndAllPathSpellings) {
  TempDir dir;
  const std::string prefix = dir / "corpus_text_document";
  const auto docs = sample_docs(1000);  // up to 11000: needs uint16
  write_megatron(prefix, docs, 8);
  for (const std::string& p : {prefix, prefix + ".bin", prefix + ".idx"}) {
    auto s = open_token_stream(DataFormat::Megatron, p, 50257);
    ASSERT_EQ(s->size(), 11) << p;
    EXPECT_EQ(read_all(*s, 0, 11), flatten(docs)) << p;
    EXPECT_EQ(read_all(*s, 2, 4), (std::vector<int32_t>{3000, 4000, 5000, 6000}));
    EXPECT_THAT(s->describe(), HasSubstr(prefix));
    EXPECT_THAT(s->describe(), HasSubstr("5 documents"));
    EXPECT_THAT(s->describe(), HasSubstr("uint16"));
  }
}

TEST(Megatron, Int32TokensAboveUint16) {
  TempDir dir;
  const std::string prefix = dir / "big";
  const auto docs = sample_docs(10000);  // up to 110000
  write_megatron(prefix, docs, 4);
  auto s = open_token_stream(DataFormat::Megatron, prefix, 128256);
  ASSERT_EQ(s->size(), 11);
  EXPECT_EQ(read_all(*s, 0, 11), flatten(docs));
  EXPECT_THAT(s->describe(), HasSubstr("int32"));
}

TEST(Megatron, EveryIntegerDtype) {
  for (int code : {1, 2, 3, 4, 5, 8}) {
    TempDir dir;
    const std::string prefix = dir / "d";
    const auto docs = sample_docs(10);  // up to 110: fits int8
    write_megatron(prefix, docs, code);
    auto s = open_token_stream(DataFormat::Megatron, prefix, 1000);
    ASSERT_EQ(s->size(), 11) << code;
    EXPECT_EQ(read_all(*s, 0, 11), flatten(docs)) << code;
  }
}

TEST(Megatron, ScatteredSequencesAreReadInIndexOrder) {
  // Pointers not back to back (sequences stored in reverse order, with a gap): the index decides.
  TempDir dir;
  const std::string prefix = dir / "scattered";
  std::string bin;
  datatest::append_le<uint16_t>(bin, 0xdead & 0x7fff);  // a gap of one token
  const int64_t p2 = static_cast<int64_t>(bin.size());
  for (uint16_t t : {30, 31}) datatest::append_le(bin, t);
  const int64_t p1 = static_cast<int64_t>(bin.size());
  for (uint16_t t : {20, 21, 22}) datatest::append_le(bin, t);
  const int64_t p0 = static_cast<int64_t>(bin.size());
  for (uint16_t t : {10}) datatest::append_le(bin, t);
  write_bytes(prefix + ".bin", bin);
  write_bytes(prefix + ".idx", datatest::megatron_idx(8, {1, 3, 2}, {p0, p1, p2}, {0, 2, 3}));
  auto s = open_token_stream(DataFormat::Megatron, prefix, 100);
  ASSERT_EQ(s->size(), 6);
  EXPECT_EQ(read_all(*s, 0, 6), (std::vector<int32_t>{10, 20, 21, 22, 30, 31}));
  EXPECT_EQ(read_all(*s, 2, 3), (std::vector<int32_t>{21, 22, 30}));
  EXPECT_THAT(s->describe(), HasSubstr("2 documents"));
}

TEST(MegatronErrors, BadMagic) {
  TempDir dir;
  const std::string prefix = dir / "m";
  write_megatron(prefix, sample_docs(1), 8);
  std::string idx = datatest::read_bytes(prefix + ".idx");
  idx[0] = 'X';
  write_bytes(prefix + ".idx", idx);
  const std::string msg = error_of([&] { open_token_stream(DataFormat::Megatron, prefix, 100); });
  EXPECT_THAT(msg, HasSubstr(prefix + ".idx"));
  EXPECT_THAT(msg, HasSubstr("wrong magic at byte offset 0"));
}

TEST(MegatronErrors, WrongVersion) {
  TempDir dir;
  const std::string prefix = dir / "m";
  write_megatron(prefix, sample_docs(1), 8);
  write_bytes(prefix + ".idx", datatest::megatron_idx(8, {3}, {0}, {0, 1}, 2));
  const std::string msg = error_of([&] { open_token_stream(DataFormat::Megatron, prefix, 100); });
  EXPECT_THAT(msg, HasSubstr(prefix + ".idx"));
  EXPECT_THAT(msg, HasSubstr("unsupported version 2 at byte offset 9"));
}

TEST(MegatronErrors, FloatDtypesRejected) {
  for (int code : {6, 7}) {
    TempDir dir;
    const std::string prefix = dir / "f";
    write_megatron(prefix, sample_docs(1), code);
    const std::string msg = error_of([&] { open_token_stream(DataFormat::Megatron, prefix, 100); });
    EXPECT_THAT(msg, HasSubstr(prefix + ".idx"));
    EXPECT_THAT(msg, HasSubstr(fmt::format("dtype code {}", code)));
    EXPECT_THAT(msg, HasSubstr(code == 6 ? "float64" : "float32"));
    EXPECT_THAT(msg, HasSubstr("byte offset 17"));
  }
}

TEST(MegatronErrors, BinShorterThanIndexSays) {
  TempDir dir;
  const std::string prefix = dir / "m";
  write_megatron(prefix, sample_docs(1), 8);
  std::string bin = datatest::read_bytes(prefix + ".bin");
  write_bytes(prefix + ".bin", bin.substr(0, bin.size() - 2));
  const std::string msg = error_of([&] { open_token_stream(DataFormat::Megatron, prefix, 100); });
  EXPECT_THAT(msg, HasSubstr(prefix + ".bin"));
  EXPECT_THAT(msg, HasSubstr("shorter than its index"));
  EXPECT_THAT(msg, HasSubstr("sequence 4"));
  EXPECT_THAT(msg, HasSubstr("but the .bin has 20 bytes"));
}

TEST(MegatronErrors, TruncatedIndex) {
  TempDir dir;
  const std::string prefix = dir / "m";
  write_megatron(prefix, sample_docs(1), 8);
  std::string idx = datatest::read_bytes(prefix + ".idx");
  write_bytes(prefix + ".idx", idx.substr(0, idx.size() - 8));
  std::string msg = error_of([&] { open_token_stream(DataFormat::Megatron, prefix, 100); });
  EXPECT_THAT(msg, HasSubstr(prefix + ".idx"));
  EXPECT_THAT(msg, HasSubstr("truncated"));
  write_bytes(prefix + ".idx", idx.substr(0, 20));
  msg = error_of([&] { open_token_stream(DataFormat::Megatron, prefix, 100); });
  EXPECT_THAT(msg, HasSubstr(prefix + ".idx"));
  EXPECT_THAT(msg, HasSubstr("truncated: 20 bytes"));
}

TEST(MegatronErrors, BadDocumentIndices) {
  TempDir dir;
  const std::string prefix = dir / "m";
  write_megatron(prefix, {{1, 2}, {3}}, 8);
  write_bytes(prefix + ".idx", datatest::megatron_idx(8, {2, 1}, {0, 4}, {0, 2, 1}));
  const std::string msg = error_of([&] { open_token_stream(DataFormat::Megatron, prefix, 100); });
  EXPECT_THAT(msg, HasSubstr(prefix + ".idx"));
  EXPECT_THAT(msg, HasSubstr("document index 2"));
}

TEST(MegatronErrors, TokenIdNotBelowVocab) {
  TempDir dir;
  const std::string prefix = dir / "m";
  write_megatron(prefix, {{1, 2, 3}, {4, 500, 6}}, 4);
  auto s = open_token_stream(DataFormat::Megatron, prefix, 100);
  std::vector<int32_t> buf(6);
  s->read(0, 4, buf.data());
  const std::string msg = error_of([&] { s->read(0, 6, buf.data()); });
  EXPECT_THAT(msg, HasSubstr(prefix + ".bin"));
  EXPECT_THAT(msg, HasSubstr("token id 500 at token offset 4 (byte offset 16"));
  // Negative ids of signed dtypes are rejected too.
  write_megatron(prefix + "8", {{1, -2, 3}}, 2);
  auto s2 = open_token_stream(DataFormat::Megatron, prefix + "8", 100);
  EXPECT_THAT(error_of([&] { s2->read(0, 3, buf.data()); }), HasSubstr("token id -2 at token offset 1"));
}

TEST(MegatronErrors, MissingFiles) {
  TempDir dir;
  const std::string prefix = dir / "m";
  std::string msg = error_of([&] { open_token_stream(DataFormat::Megatron, prefix, 100); });
  EXPECT_THAT(msg, HasSubstr(prefix + ".idx"));
  EXPECT_THAT(msg, HasSubstr("No such file"));
  write_megatron(prefix, sample_docs(1), 8);
  std::filesystem::remove(prefix + ".bin");
  msg = error_of([&] { open_token_stream(DataFormat::Megatron, prefix + ".idx", 100); });
  EXPECT_THAT(msg, HasSubstr(prefix + ".bin"));
  EXPECT_THAT(msg, HasSubstr("No such file"));
}

// ------------------------------------------------------------------------------------------------
// text

TEST(Text, BytesAreTokens) {
  TempDir dir;
  const std::string path = dir / "tiny.txt";
  const std::string text = "Hello, trident!\n\xff\x01";
  write_bytes(path, text);
  auto s = open_token_stream(DataFormat::Text, path, 256);
  ASSERT_EQ(s->size(), static_cast<int64_t>(text.size()));
  auto all = read_all(*s, 0, s->size());
  for (size_t i = 0; i < text.size(); ++i) EXPECT_EQ(all[i], static_cast<unsigned char>(text[i])) << i;
  EXPECT_EQ(all[16], 255);
  EXPECT_EQ(read_all(*s, 7, 7), (std::vector<int32_t>{'t', 'r', 'i', 'd', 'e', 'n', 't'}));
  EXPECT_THAT(s->describe(), HasSubstr(path));
  // A larger vocabulary is fine (e.g. a padded one).
  EXPECT_EQ(open_token_stream(DataFormat::Text, path, 50304)->size(), s->size());
}

TEST(TextErrors, VocabBelow256AndMissingFile) {
  TempDir dir;
  const std::string path = dir / "tiny.txt";
  write_bytes(path, "abc");
  std::string msg = error_of([&] { open_token_stream(DataFormat::Text, path, 255); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("vocab_size is 255"));
  EXPECT_THAT(msg, HasSubstr(">= 256"));
  msg = error_of([&] { open_token_stream(DataFormat::Text, dir / "nope.txt", 256); });
  EXPECT_THAT(msg, HasSubstr(dir / "nope.txt"));
  EXPECT_THAT(msg, HasSubstr("No such file"));
  msg = error_of([&] { open_token_stream(DataFormat::Text, "", 256); });
  EXPECT_THAT(msg, HasSubstr("data path is empty"));
}

}  // namespace
}  // namespace trident
