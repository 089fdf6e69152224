// From text to a Hugging Face directory, as a user goes: `trident data prepare` (GPT-2 tokens),
// `trident train` on them (data.tokenizer resolves to gpt2), `trident ckpt export`: the model comes with
// GPT-2's vocab.json and merges.txt (the built-in files, byte for byte), tokenizer_config.json and
// generation_config.json whose <|endoftext|> id fits the vocabulary.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/test_support.hpp"

namespace trident::test {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string file_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

nlohmann::json json_file(const std::string& path) { return nlohmann::json::parse(file_text(path)); }

int run_in(const std::string& dir, const std::string& args, std::string* out) {
  const std::string cmd = fmt::format("cd {} && {} OPENBLAS_NUM_THREADS=1 timeout -k 5 120 {} -n 1 {} {}", dir,
                                      without_parent_mpi_env(), local_mpiexec(), trident_binary(), args);
  const int rc = run_command(cmd, out);
  *out = "$ " + cmd + "\n" + *out;
  return rc;
}

// A one-step run of a tiny model that checkpoints into ckpt/; `data` is the [data] section's lines.
std::string one_step_deck(int64_t vocab, const std::string& data) {
  return fmt::format("[model]\nvocab_size = {}\nseq_len = 16\nlayers = 1\nhidden = 32\nheads = 2\n[train]\nsteps = 1\n"
                     "micro_batch = 2\nglobal_batch = 2\n[data]\n{}\n[checkpoint]\ndir = \"ckpt\"\n",
                     vocab, data);
}

TEST(ExportTokenizer, TextToHuggingFaceDirectoryWithGpt2TokenizerFiles) {
  const std::string dir = make_temp_dir("trident-export-tokenizer");
  std::string out;
  ASSERT_EQ(run_in(dir, "data prepare /usr/share/common-licenses/GPL-3 -o gpl --val-documents 0", &out), 0) << out;
  write_file(dir + "/deck.toml", one_step_deck(50257, "format = \"llmc\"\npath = \"gpl_train_*.bin\""));
  ASSERT_EQ(run_in(dir, "train deck.toml", &out), 0) << out;
  ASSERT_EQ(run_in(dir, "ckpt export ckpt --out hf", &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("model.safetensors, config.json, vocab.json, merges.txt, tokenizer_config.json, "
                             "generation_config.json; tokenizer: GPT-2's BPE"));
  const std::string gpt2 = std::string(TRIDENT_SOURCE_DIR) + "/third_party/gpt2";
  EXPECT_EQ(file_text(dir + "/hf/vocab.json"), file_text(gpt2 + "/encoder.json"));
  EXPECT_EQ(file_text(dir + "/hf/merges.txt"), file_text(gpt2 + "/vocab.bpe"));
  const auto vocab = json_file(dir + "/hf/vocab.json");
  EXPECT_EQ(vocab.at("<|endoftext|>"), 50256);
  const auto config = json_file(dir + "/hf/config.json");
  EXPECT_EQ(config.at("bos_token_id"), 50256);
  EXPECT_EQ(config.at("eos_token_id"), 50256);
  EXPECT_LT(config.at("eos_token_id").get<int64_t>(), config.at("vocab_size").get<int64_t>());
  const auto tokenizer = json_file(dir + "/hf/tokenizer_config.json");
  EXPECT_EQ(tokenizer.at("tokenizer_class"), "GPT2Tokenizer");
  EXPECT_EQ(tokenizer.at("eos_token"), "<|endoftext|>");
  EXPECT_EQ(tokenizer.at("model_max_length"), 16);
  const auto generation = json_file(dir + "/hf/generation_config.json");
  EXPECT_EQ(generation.at("eos_token_id"), 50256);
  EXPECT_EQ(generation.at("bos_token_id"), 50256);
  fs::remove_all(dir);
}

// A byte-level run exports no tokenizer files and says why.
TEST(ExportTokenizer, ByteLevelRunExportsNoTokenizerFiles) {
  const std::string dir = make_temp_dir("trident-export-bytes");
  write_file(dir + "/deck.toml", one_step_deck(256, "path = \"/usr/share/common-licenses/GPL-3\""));
  std::string out;
  ASSERT_EQ(run_in(dir, "train deck.toml", &out), 0) << out;
  ASSERT_EQ(run_in(dir, "ckpt export ckpt --out hf", &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("tokenizer: bytes: the ids are the text's bytes"));
  EXPECT_FALSE(fs::exists(dir + "/hf/vocab.json"));
  EXPECT_FALSE(json_file(dir + "/hf/config.json").contains("eos_token_id"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace trident::test
