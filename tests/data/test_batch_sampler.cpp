// BatchSampler: sequential windows (with wrap-around), the shuffle permutation (a permutation per
// epoch, seeded, checked against an independent Python implementation), and independence from the
// data-parallel split (also across real MPI ranks).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <sstream>

#include "data/dataset.hpp"
#include "data_test_util.hpp"

namespace trident {
namespace {

using datatest::error_of;
using testing::HasSubstr;

// An in-memory stream: token i is ids[i].
class VectorStream final : public TokenStream {
 public:
  explicit VectorStream(std::vector<int32_t> ids) : ids_(std::move(ids)) {}
  int64_t size() const override { return static_cast<int64_t>(ids_.size()); }
  void read(int64_t begin, int64_t count, int32_t* out) const override {
    if (begin < 0 || count < 0 || begin + count > size()) throw Error("VectorStream: read out of range");
    std::copy(ids_.begin() + begin, ids_.begin() + begin + count, out);
  }
  std::string describe() const override { return fmt::format("vector ({} tokens)", ids_.size()); }

 private:
  std::vector<int32_t> ids_;
};

// Tokens 1000 + i so that a token's value tells its position.
VectorStream positional(int64_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 1000);
  return VectorStream(std::move(v));
}

struct Sample {
  std::vector<int32_t> inputs, targets;
  bool operator==(const Sample& o) const { return inputs == o.inputs && targets == o.targets; }
};

Sample get(const BatchSampler& s, int64_t step, int64_t j) {
  Sample out{std::vector<int32_t>(static_cast<size_t>(s.seq_len())), std::vector<int32_t>(static_cast<size_t>(s.seq_len()))};
  s.sample(step, j, out.inputs.data(), out.targets.data());
  return out;
}

// The window of seq_len + 1 tokens from `start`, wrapping modulo the stream length.
Sample expected_window(int64_t start, int64_t seq_len, int64_t total) {
  Sample e;
  for (int64_t k = 0; k < seq_len; ++k) {
    e.inputs.push_back(static_cast<int32_t>(1000 + (start + k) % total));
    e.targets.push_back(static_cast<int32_t>(1000 + (start + k + 1) % total));
  }
  return e;
}

TEST(SamplerSequential, WindowsFollowTheFormulaAndWrapAround) {
  const int64_t total = 103, L = 8, B = 4;
  VectorStream stream = positional(total);
  BatchSampler s(stream, DataOrder::Sequential, 1234, L, B);
  int wrapped = 0;
  for (int64_t step = 0; step < 13; ++step) {
    for (int64_t j = 0; j < B; ++j) {
      const int64_t start = ((step * B + j) * L) % total;
      ASSERT_EQ(s.window_start(step, j), start);
      const Sample got = get(s, step, j);
      ASSERT_EQ(got, expected_window(start, L, total)) << "step " << step << " j " << j;
      if (start + L + 1 > total) ++wrapped;
    }
  }
  EXPECT_GE(wrapped, 3);  // windows that cross the end and continue from token 0 were covered
  // The first windows are the stream itself.
  EXPECT_EQ(get(s, 0, 0).inputs.front(), 1000);
  EXPECT_EQ(get(s, 0, 1).inputs.front(), 1008);
  EXPECT_EQ(get(s, 1, 0).inputs.front(), 1032);
  // A window whose target token is the first token of the stream (start + L == total).
  const int64_t total2 = 9;
  VectorStream tiny = positional(total2);
  BatchSampler t(tiny, DataOrder::Sequential, 0, 8, 1);
  EXPECT_EQ(get(t, 0, 0), expected_window(0, 8, total2));
  EXPECT_EQ(get(t, 1, 0), expected_window(8, 8, total2));  // 1 token then wrap
  EXPECT_EQ(get(t, 2, 0), expected_window(7, 8, total2));
}

TEST(SamplerSequential, LargeStepsDoNotOverflow) {
  VectorStream stream = positional(1001);
  BatchSampler s(stream, DataOrder::Sequential, 0, 1000, 512);
  const int64_t step = 100'000'000'000'000LL;  // (step*512 + j)*1000 overflows int64
  const __int128 w = static_cast<__int128>(step) * 512 + 3;
  const int64_t start = static_cast<int64_t>((w * 1000) % 1001);
  EXPECT_EQ(s.window_start(step, 3), start);
  EXPECT_EQ(get(s, step, 3), expected_window(start, 1000, 1001));
}

std::vector<int64_t> epoch_starts(const BatchSampler& s, int64_t first_window, int64_t count) {
  std::vector<int64_t> out;
  for (int64_t w = first_window; w < first_window + count; ++w) {
    out.push_back(s.window_start(w / s.global_batch(), w % s.global_batch()));
  }
  return out;
}

TEST(SamplerShuffle, EveryWindowExactlyOncePerEpoch) {
  const int64_t total = 103, L = 8;
  VectorStream stream = positional(total);
  for (int64_t B : {4, 5, 1, 12}) {  // 4 and 12 divide W = 12, 5 and 1 straddle epochs inside a step or not
    BatchSampler s(stream, DataOrder::Shuffle, 42, L, B);
    const int64_t W = s.windows_per_epoch();
    ASSERT_EQ(W, (total - 1) / L);
    std::vector<int64_t> all;
    for (int64_t e = 0; e < 3; ++e) {
      std::vector<int64_t> starts = epoch_starts(s, e * W, W);
      std::vector<int64_t> sorted = starts;
      std::sort(sorted.begin(), sorted.end());
      for (int64_t i = 0; i < W; ++i) ASSERT_EQ(sorted[i], i * L) << "B " << B << " epoch " << e;
      all.insert(all.end(), starts.begin(), starts.end());
    }
    // The content is the window at that start (never wrapping).
    for (int64_t w = 0; w < 3 * W; ++w) {
      const int64_t step = w / B, j = w % B;
      ASSERT_EQ(get(s, step, j), expected_window(all[w], L, total));
      ASSERT_LE(all[w] + L + 1, total);
    }
    // Epochs are differently ordered.
    EXPECT_NE(std::vector<int64_t>(all.begin(), all.begin() + W), std::vector<int64_t>(all.begin() + W, all.begin() + 2 * W));
    EXPECT_NE(std::vector<int64_t>(all.begin() + W, all.begin() + 2 * W), std::vector<int64_t>(all.begin() + 2 * W, all.end()));
  }
}

TEST(SamplerShuffle, DeterministicForASeedDifferentForAnother) {
  VectorStream stream = positional(4097);
  BatchSampler a(stream, DataOrder::Shuffle, 1234, 16, 8);
  BatchSampler b(stream, DataOrder::Shuffle, 1234, 16, 8);
  BatchSampler c(stream, DataOrder::Shuffle, 1235, 16, 8);
  const int64_t W = a.windows_per_epoch();
  ASSERT_EQ(W, 256);
  EXPECT_EQ(epoch_starts(a, 0, W), epoch_starts(b, 0, W));
  EXPECT_EQ(epoch_starts(a, 5 * W, W), epoch_starts(b, 5 * W, W));
  EXPECT_NE(epoch_starts(a, 0, W), epoch_starts(c, 0, W));
  // Going back to an earlier epoch (e.g. after a resume) gives the same windows.
  const auto later = epoch_starts(a, 7 * W + 3, 20);
  (void)epoch_starts(a, 0, W);
  EXPECT_EQ(epoch_starts(a, 7 * W + 3, 20), later);
  EXPECT_EQ(get(a, 100, 3), get(b, 100, 3));
}

TEST(SamplerShuffle, PermutationMatchesIndependentPythonReference) {
  EXPECT_EQ(shuffle_permutation(1234, 0, 10), (std::vector<int64_t>{7, 3, 9, 4, 0, 2, 1, 6, 5, 8}));
  EXPECT_TRUE(shuffle_permutation(1, 2, 0).empty());
  EXPECT_EQ(shuffle_permutation(1, 2, 1), std::vector<int64_t>{0});
  const std::string missing = test::missing_python_modules({"sys"});
  if (!missing.empty()) FAIL() << missing;
  const std::string tool = std::string(TRIDENT_TEST_DATA_DIR) + "/tools/shuffle_reference.py";
  struct Case { uint64_t seed, epoch; int64_t n; };
  for (const Case& c : {Case{1234, 0, 10}, Case{1234, 1, 10}, Case{0, 0, 1000}, Case{18446744073709551615ULL, 3, 777},
                        Case{42, 99, 2}}) {
    std::string out;
    ASSERT_EQ(test::run_command(fmt::format("/usr/bin/python3 {} {} {} {}", tool, c.seed, c.epoch, c.n), &out), 0) << out;
    std::istringstream in(out);
    std::vector<int64_t> ref;
    for (int64_t v; in >> v;) ref.push_back(v);
    EXPECT_EQ(shuffle_permutation(c.seed, c.epoch, c.n), ref) << "seed " << c.seed << " epoch " << c.epoch;
  }
}

// Sample (s, j) does not depend on how j is split among data-parallel ranks.
TEST(SamplerLayout, UnionOfRankSlicesIsTheGlobalBatch) {
  VectorStream stream = positional(1000);
  for (DataOrder order : {DataOrder::Sequential, DataOrder::Shuffle}) {
    BatchSampler global(stream, order, 7, 16, 8);
    for (int dp : {2, 4}) {
      // Each rank has its own sampler, as MPI ranks have.
      for (int64_t step = 0; step < 12; ++step) {
        std::vector<Sample> joined;
        for (int r = 0; r < dp; ++r) {
          BatchSampler mine(stream, order, 7, 16, 8);
          const int64_t per = 8 / dp;
          for (int64_t j = r * per; j < (r + 1) * per; ++j) joined.push_back(get(mine, step, j));
        }
        for (int64_t j = 0; j < 8; ++j) ASSERT_EQ(joined[j], get(global, step, j)) << "dp " << dp << " step " << step;
      }
    }
  }
}

// The same across real MPI ranks, each with its own mapping of an llm.c shard.
TEST(SamplerLayout, MpiRanksTogetherSeeTheGlobalBatch) {
  const int rank = test::world_rank(), size = test::world_size();
  const int64_t L = 32, B = 4 * size;
  // Every rank writes the same shard into its own directory and maps it.
  datatest::TempDir dir;
  std::vector<uint16_t> tokens(5000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>((i * 31 + 7) % 50257);
  datatest::write_bytes(dir / "shard.bin", datatest::llmc_bytes(tokens));
  auto stream = open_token_stream(DataFormat::LlmC, dir / "shard.bin", 50257);
  for (DataOrder order : {DataOrder::Sequential, DataOrder::Shuffle}) {
    BatchSampler s(*stream, order, 99, L, B);
    for (int64_t step : {0, 1, 17, 40}) {
      const int64_t per = B / size;
      std::vector<int32_t> mine(static_cast<size_t>(per * 2 * L));
      for (int64_t k = 0; k < per; ++k) {
        s.sample(step, rank * per + k, mine.data() + 2 * k * L, mine.data() + (2 * k + 1) * L);
      }
      std::vector<int32_t> all(mine.size() * static_cast<size_t>(size));
      MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_INT, all.data(), static_cast<int>(mine.size()), MPI_INT,
                    MPI_COMM_WORLD);
      for (int64_t j = 0; j < B; ++j) {
        std::vector<int32_t> in(L), tg(L);
        s.sample(step, j, in.data(), tg.data());
        ASSERT_EQ(std::vector<int32_t>(all.begin() + 2 * j * L, all.begin() + (2 * j + 1) * L), in) << j;
        ASSERT_EQ(std::vector<int32_t>(all.begin() + (2 * j + 1) * L, all.begin() + (2 * j + 2) * L), tg) << j;
        // And the window is the formula's, read from the file.
        const int64_t start = s.window_start(step, j);
        for (int64_t k = 0; k < L; ++k) {
          ASSERT_EQ(in[k], tokens[(start + k) % tokens.size()]);
          ASSERT_EQ(tg[k], tokens[(start + k + 1) % tokens.size()]);
        }
      }
    }
  }
}

TEST(SamplerEndToEnd, SequentialAcrossShardsAndWrap) {
  datatest::TempDir dir;
  std::vector<uint16_t> a(40), b(25);
  std::iota(a.begin(), a.end(), 0);
  std::iota(b.begin(), b.end(), 40);
  datatest::write_bytes(dir / "tok_0.bin", datatest::llmc_bytes(a));
  datatest::write_bytes(dir / "tok_1.bin", datatest::llmc_bytes(b));
  auto stream = open_token_stream(DataFormat::LlmC, dir / "tok_*.bin", 100);
  BatchSampler s(*stream, DataOrder::Sequential, 0, 10, 3);
  for (int64_t step = 0; step < 6; ++step) {
    for (int64_t j = 0; j < 3; ++j) {
      const int64_t start = ((step * 3 + j) * 10) % 65;
      std::vector<int32_t> in(10), tg(10);
      s.sample(step, j, in.data(), tg.data());
      for (int64_t k = 0; k < 10; ++k) {
        ASSERT_EQ(in[k], (start + k) % 65);
        ASSERT_EQ(tg[k], (start + k + 1) % 65);
      }
    }
  }
}

TEST(SamplerErrors, StreamTooShortAndBadArguments) {
  VectorStream stream = positional(8);
  std::string msg = error_of([&] { BatchSampler(stream, DataOrder::Sequential, 0, 8, 1); });
  EXPECT_THAT(msg, HasSubstr("vector (8 tokens)"));
  EXPECT_THAT(msg, HasSubstr("seq_len + 1 = 9"));
  EXPECT_THAT(error_of([&] { BatchSampler(stream, DataOrder::Shuffle, 0, 0, 1); }), HasSubstr("seq_len"));
  EXPECT_THAT(error_of([&] { BatchSampler(stream, DataOrder::Shuffle, 0, 4, 0); }), HasSubstr("global_batch"));
  BatchSampler s(stream, DataOrder::Shuffle, 0, 4, 2);
  std::vector<int32_t> in(4), tg(4);
  EXPECT_THAT(error_of([&] { s.sample(0, 2, in.data(), tg.data()); }), HasSubstr("j = 2"));
  EXPECT_THAT(error_of([&] { s.sample(-1, 0, in.data(), tg.data()); }), HasSubstr("step -1"));
}

TEST(SamplerErrors, BadTokenInWindowNamesTheFile) {
  datatest::TempDir dir;
  std::vector<uint16_t> tokens(100, 3);
  tokens[70] = 9999;
  const std::string path = dir / "t.bin";
  datatest::write_bytes(path, datatest::llmc_bytes(tokens));
  auto stream = open_token_stream(DataFormat::LlmC, path, 1000);
  BatchSampler s(*stream, DataOrder::Sequential, 0, 10, 2);
  std::vector<int32_t> in(10), tg(10);
  s.sample(2, 1, in.data(), tg.data());  // tokens 50..60: fine
  // Tokens 60..70: 70 is the last target.
  const std::string msg = error_of([&] { s.sample(3, 0, in.data(), tg.data()); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("token id 9999 at token offset 70"));
}

}  // namespace
}  // namespace trident
