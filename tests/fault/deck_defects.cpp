// Deck defects of issue #17: each case was accepted, crashed, hung or exited with the wrong status
// before the fix. In-process cases call parse_deck; file cases run `trident check` under `timeout`.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <string>

#include "common/test_support.hpp"
#include "core/error.hpp"
#include "deck/deck.hpp"
#include "pipeline/partition.hpp"

namespace trident {
namespace {

const char* kBase = R"([model]
vocab_size = 256
seq_len = 32
layers = 4
hidden = 32
heads = 4

[data]
path = "x.txt"
)";

// The error message of parse_deck (base deck + overrides), or "" when it is accepted.
std::string deck_error(const std::vector<std::string>& overrides, const std::string& text = kBase) {
  try {
    parse_deck(text, "deck.toml", overrides);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DeckDefects, LayersPerStageThatOverflowsTheSumIsRejected) {
  // 2 * (2^63 - 1) + 2 wraps to 0 in int64; before the fix a matching layers count passed validation.
  const std::string e = deck_error({"mesh.pp=3", "model.layers=4",
                                    "mesh.layers_per_stage=[9223372036854775807, 9223372036854775807, 2]"});
  EXPECT_NE(e.find("layers_per_stage"), std::string::npos) << e;
  EXPECT_NE(e.find("an element above 2147483647"), std::string::npos) << e;
}

TEST(DeckDefects, FloatKeyGivenAHugeIntegerIsReadOrRejectedCleanly) {
  // 2^53 + 1 has no exact double: before the fix, "internal error: bad optional access".
  const std::string e = deck_error({"train.beta1=9007199254740993"});
  EXPECT_NE(e.find("[train] beta1 = 9007199254740993: out of range"), std::string::npos) << e;
  const Config c = parse_deck(kBase, "deck.toml", {"train.lr=9007199254740993"});
  EXPECT_EQ(c.train.lr, 9007199254740992.0);  // the nearest double
}

TEST(DeckDefects, BetasThatRoundToOneInFp32AreRejected) {
  // 0.99999999 < 1 in double but is 1.0f, and AdamW's bias correction 1 - beta^t becomes 0.
  for (const char* key : {"train.beta1", "train.beta2"}) {
    const std::string e = deck_error({std::string(key) + "=0.99999999"});
    EXPECT_NE(e.find("out of range once rounded to fp32 (1)"), std::string::npos) << key << ": " << e;
  }
  // The largest float below 1 is 1 - 2^-24 = 0.99999994: still accepted.
  EXPECT_EQ(deck_error({"train.beta2=0.99999994"}), "");
  // The same rule for an open lower bound: eps = 1e-50 is 0 in fp32.
  EXPECT_NE(deck_error({"train.eps=1e-50"}).find("once rounded to fp32 (0)"), std::string::npos);
}

TEST(DeckDefects, HugeShapesAreRejectedInsteadOfOverflowing) {
  const std::string e = deck_error({"model.hidden=2147483647", "model.heads=1"});
  EXPECT_NE(e.find("parameters; at most 140737488355328 are supported"), std::string::npos) << e;
  const std::string a = deck_error({"train.micro_batch=2147483647", "train.global_batch=2147483647",
                                    "model.seq_len=2147483647"});
  EXPECT_NE(a.find("elements in one activation"), std::string::npos) << a;
}

TEST(DeckDefects, ParameterCountOfGpt2SmallIsExact) {
  // Hugging Face's gpt2 checkpoint: 124,439,808 parameters (tied head, 50257 x 768 embedding).
  const Config c = parse_deck("[model]\n", "deck.toml");
  EXPECT_EQ(parameter_count(c.model), 124439808);
}

TEST(DeckDefects, ValEveryWithoutValPathIsAnError) {
  const std::string text = std::string(kBase) + "val_every = 10\n";
  const std::string e = deck_error({}, text);
  EXPECT_NE(e.find("deck.toml:10:13: [data] val_every = 10 needs [data] val_path"), std::string::npos) << e;
  EXPECT_EQ(deck_error({"data.val_path=v.txt"}, text), "");
}

// The dynamic program the partition used before (O(chunks * layers^2)), kept here as the reference.
std::vector<int64_t> reference_partition(int64_t L, int64_t chunks, double layer, double head) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(size_t(chunks + 1), std::vector<double>(size_t(L + 1), inf));
  std::vector<std::vector<int64_t>> cut(size_t(chunks + 1), std::vector<int64_t>(size_t(L + 1), 0));
  best[0][0] = 0;
  for (int64_t k = 1; k <= chunks; ++k)
    for (int64_t l = k; l <= L - (chunks - k); ++l)
      for (int64_t j = k - 1; j < l; ++j) {
        const double worst = std::max(best[size_t(k - 1)][size_t(j)], (l - j) * layer + (k == chunks ? head : 0.0));
        if (worst < best[size_t(k)][size_t(l)]) best[size_t(k)][size_t(l)] = worst, cut[size_t(k)][size_t(l)] = j;
      }
  std::vector<int64_t> sizes(static_cast<size_t>(chunks));
  for (int64_t k = chunks, l = L; k > 0; --k) {
    sizes[size_t(k - 1)] = l - cut[size_t(k)][size_t(l)];
    l = cut[size_t(k)][size_t(l)];
  }
  return sizes;
}

TEST(DeckDefects, PartitionMatchesTheDynamicProgram) {
  for (int64_t hidden : {8, 64, 768})
    for (int64_t vocab : {256, 50257, 1000000})
      for (int64_t chunks = 1; chunks <= 6; ++chunks)
        for (int64_t layers = chunks; layers <= 30; ++layers) {
          Config c;
          c.model.layers = layers;
          c.model.hidden = hidden;
          c.model.seq_len = 64;
          c.model.vocab_size = vocab;
          c.mesh.pp = int(chunks);
          const double layer = 24.0 * hidden * hidden + 4.0 * 64 * hidden, head = 2.0 * hidden * vocab;
          ASSERT_EQ(partition_layers(c), reference_partition(layers, chunks, layer, head))
              << "layers " << layers << " chunks " << chunks << " hidden " << hidden << " vocab " << vocab;
        }
}

TEST(DeckDefects, AMillionLayersPartitionQuickly) {
  // Before the fix: quadratic in layers, so `check` and `train` never got past the partition.
  for (int pp : {1, 4}) {
    const auto t0 = std::chrono::steady_clock::now();
    const Config c = parse_deck(kBase, "deck.toml", {"model.layers=1000000", fmt::format("mesh.pp={}", pp)});
    const auto sizes = partition_layers(c);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 1.0);
    ASSERT_EQ(sizes.size(), size_t(pp));
    int64_t sum = 0;
    for (auto n : sizes) sum += n;
    EXPECT_EQ(sum, 1000000);
    // Equal layers with a tiny head (vocab 256): the stages differ by at most one layer.
    EXPECT_LE(*std::max_element(sizes.begin(), sizes.end()) - *std::min_element(sizes.begin(), sizes.end()), 1);
  }
}

// `trident check PATH` under a time limit: exit status and output.
int check_deck(const std::string& path, std::string* out) {
  return test::run_command(test::without_parent_mpi_env() + " timeout -k 2 20 " + test::trident_binary() + " check '" + path + "'", out);
}

TEST(DeckDefects, MissingDeckOrDirectoryExitsTwo) {
  const std::string dir = test::make_temp_dir("trident-deck");
  std::string out;
  EXPECT_EQ(check_deck(dir + "/missing.toml", &out), 2) << out;  // was 105 (CLI11's ExistingFile)
  EXPECT_NE(out.find("missing.toml: cannot read the deck file (No such file or directory)"), std::string::npos) << out;
  EXPECT_EQ(check_deck(dir, &out), 2) << out;
  EXPECT_NE(out.find("is a directory, not a deck file"), std::string::npos) << out;
  // `plan` reads decks the same way (it exited 105 from CLI11's ExistingFile).
  EXPECT_EQ(test::run_command(test::without_parent_mpi_env() + " " + test::trident_binary() + " plan '" + dir +
                                  "/missing.toml' --cluster cpu",
                              &out),
            2)
      << out;
  EXPECT_NE(out.find("missing.toml: cannot read the deck file (No such file or directory)"), std::string::npos) << out;
}

// Text (bytes) with GPT-2's vocabulary size trained without a word; now `check` (and `train`, which
// loads the deck the same way) warns, once for the job however many ranks read the deck, to stderr.
TEST(DeckDefects, TextWithAGpt2VocabularyWarnsOnceThatItTrainsOnBytes) {
  const std::string dir = test::make_temp_dir("trident-deck");
  test::write_file(dir + "/deck.toml",
                   "[model]\nvocab_size = 50257\nseq_len = 32\nlayers = 2\nhidden = 32\nheads = 4\n[mesh]\ndp = 2\n"
                   "[data]\nformat = \"text\"\npath = \"/usr/share/common-licenses/GPL-3\"\n");
  std::string out;
  const std::string check = test::without_parent_mpi_env() + " timeout -k 2 60 " + test::local_mpiexec() + " -n 2 " +
                            test::trident_binary() + " check " + dir + "/deck.toml --deck-only";
  ASSERT_EQ(test::run_command(check, &out), 0) << out;
  const std::string warning = "deck.toml:10:10: [data] format = \"text\" trains on bytes: token ids 0-255 use only "
                              "256 of the 50257 ids of [model] vocab_size (" + dir + "/deck.toml:2:14); for GPT-2 "
                              "tokens run `trident data prepare";
  const auto first = out.find(warning);
  ASSERT_NE(first, std::string::npos) << out;
  EXPECT_EQ(out.find(warning, first + 1), std::string::npos) << "said more than once:\n" << out;
  std::string stdout_only;
  ASSERT_EQ(test::run_command("(" + check + " 2>/dev/null)", &stdout_only), 0) << stdout_only;
  EXPECT_EQ(stdout_only.find("trains on bytes"), std::string::npos) << "a warning belongs on stderr:\n" << stdout_only;
}

TEST(DeckDefects, FifoAndDeviceDecksFailAtOnce) {
  const std::string dir = test::make_temp_dir("trident-deck");
  const std::string fifo = dir + "/deck.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& path : {fifo, std::string("/dev/zero")}) {
    std::string out;
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(check_deck(path, &out), 2) << path << ": " << out;  // 124: blocked (FIFO) or read forever
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
    EXPECT_NE(out.find("is not a regular file"), std::string::npos) << out;
  }
}

TEST(DeckDefects, OversizedDeckFileIsRefused) {
  const std::string dir = test::make_temp_dir("trident-deck");
  test::write_file(dir + "/big.toml", "# " + std::string(5 << 20, 'x') + "\n");
  std::string out;
  EXPECT_EQ(check_deck(dir + "/big.toml", &out), 2) << out;
  EXPECT_NE(out.find("too large for a deck"), std::string::npos) << out;
}

}  // namespace
}  // namespace trident
