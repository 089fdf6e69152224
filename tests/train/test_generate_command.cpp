// `trident generate` and `train.sample_every` as a user runs them, on the tiny byte-level deck: what
// generate refuses (exit 2, one message), samples from a checkpoint that a rerun and a TP group of 2
// reproduce, and the samples a training run prints and writes to its metrics (also under ZeRO-3, whose
// parameters are gathered for the sample). Greedy tokens against the PyTorch reference, and the KV cache
// against full recomputation, are in tests/reference; the decoder against the training forward in
// tests/parallel (test_decoder).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "common/test_support.hpp"
#include "train/train_run_util.hpp"

namespace trident::test {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

CommandRun run_generate(const std::string& dir, int np, const std::string& args) {
  return run_trident(dir, np, "generate deck.toml " + args);
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

TEST(GenerateCommand, RefusesWhatItCannotGenerate) {
  const std::string dir = make_temp_dir("trident-generate");
  write_file(dir + "/deck.toml", kTinyTextDeck);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--prompt x", "nothing to generate from: no --checkpoint, no [checkpoint] dir and no [model] init_from"},
      {"--set model.init_from=/nonexistent --prompt x", "init_from"},
      {"--checkpoint missing_dir --prompt x", "missing_dir"},
  };
  for (const auto& [args, message] : cases) {
    const CommandRun r = run_generate(dir, 1, args);
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_THAT(r.out, HasSubstr(message));
  }
  fs::remove_all(dir);
}

TEST(GenerateCommand, SamplesFromACheckpointAlikeOnOneAndTwoRanks) {
  const TrainOutput trained = run_train(1, kTinyTextDeck, {"train.steps=3", "checkpoint.dir=ckpt"});
  ASSERT_EQ(trained.rc, 0) << trained.out;
  const std::string& dir = trained.dir;
  const std::string sampling = "--set checkpoint.dir=ckpt --prompt 'The ' --max-new-tokens 10 --samples 2 --seed 3";
  const CommandRun one = run_generate(dir, 1, sampling + " --json one.json");
  ASSERT_EQ(one.rc, 0) << one.out;
  EXPECT_THAT(one.out, HasSubstr("--- sample 1 of 2 (10 tokens) ---\nThe "));
  EXPECT_THAT(one.out, HasSubstr("KV cache"));
  const auto a = read_json(dir + "/one.json");
  ASSERT_EQ(a.at("samples").size(), 2u);
  EXPECT_EQ(a.at("samples").at(0).at("tokens").size(), 10u);  // bytes have no end-of-text token: no early stop
  EXPECT_EQ(a.at("prompt_tokens"), nlohmann::json({'T', 'h', 'e', ' '}));
  const CommandRun two = run_generate(dir, 2, sampling + " --json two.json");
  ASSERT_EQ(two.rc, 0) << two.out;
  EXPECT_EQ(read_json(dir + "/two.json").at("samples"), a.at("samples")) << "tp 2 samples as tp 1 does";

  // From the export (`ckpt export`'s directory stands for model.init_from): the checkpoint's greedy tokens.
  std::string log;
  const std::string export_cmd = fmt::format("cd {} && {} {} ckpt export ckpt --out hf", dir, without_parent_mpi_env(),
                                             trident_binary());
  ASSERT_EQ(run_command(export_cmd, &log), 0) << export_cmd << "\n" << log;
  const CommandRun from_ckpt = run_generate(dir, 1, sampling + " --temperature 0 --json greedy_ckpt.json");
  const CommandRun from_export =
      run_generate(dir, 1, "--checkpoint hf --prompt 'The ' --max-new-tokens 10 --temperature 0 --json greedy_hf.json");
  ASSERT_EQ(from_ckpt.rc, 0) << from_ckpt.out;
  ASSERT_EQ(from_export.rc, 0) << from_export.out;
  EXPECT_THAT(from_export.out, HasSubstr("model.init_from hf/model.safetensors"));
  EXPECT_EQ(read_json(dir + "/greedy_hf.json").at("samples").at(0),
            read_json(dir + "/greedy_ckpt.json").at("samples").at(0));

  const std::vector<std::pair<std::string, std::string>> refusals = {
      {"--set checkpoint.dir=ckpt --prompt abc --max-new-tokens 15", "the prompt (3 tokens) and --max-new-tokens 15 "
                                                                      "need 17 positions; the model has seq_len = 16"},
      {"--set checkpoint.dir=ckpt --prompt abc --prompt-ids 1,2", "give one of --prompt, --prompt-file and --prompt-ids"},
      {"--set checkpoint.dir=ckpt --prompt-ids 1,x", "--prompt-ids: \"1,x\" is not a list of token ids in [0, 256)"},
      {"--set checkpoint.dir=ckpt --prompt-ids 256", "not a list of token ids in [0, 256)"},
      {"--set checkpoint.dir=ckpt --prompt x --temperature -1", "temperature -1 must be >= 0"},
      {"--set checkpoint.dir=ckpt --prompt x --top-p 0", "top-p 0 must be in (0, 1]"},
      {"--set checkpoint.dir=ckpt", "data.tokenizer = \"bytes\" has no end-of-text token to start from: give a prompt"},
      {"--set checkpoint.dir=ckpt --prompt-file /dev/null/x", "--prompt-file"},
  };
  for (const auto& [args, message] : refusals) {
    const CommandRun r = run_generate(dir, 1, args);
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_THAT(r.out, HasSubstr(message));
  }
  fs::remove_all(dir);
}

// A bf16 run's checkpoint generates with its bf16 working copy (kept as bf16 patterns and its 1-D tensors
// in fp32; the decoder reads them widened): the samples of the fp32 export with every tensor of 2 or
// more dimensions rounded to bf16 by tests/checkpoint/working_copy_values.py (numpy), read as fp32
// parameters with train.bf16_parameters = false, so no working copy is involved; on 1 and 2 ranks; and the
// loss `trident eval` gives (below).
// Sampled at temperature 1, so every token depends on the whole distribution (greedy decoding of this
// barely trained model gives spaces whatever the parameters' last bits).
TEST(GenerateCommand, Bf16RunGeneratesWithItsWorkingCopy) {
  const TrainOutput trained = run_train(1, kTinyTextDeck, {"train.steps=3", "checkpoint.dir=ckpt", "train.precision=bf16"});
  ASSERT_EQ(trained.rc, 0) << trained.out;
  const std::string& dir = trained.dir;
  std::string log;
  const std::string export_cmd = fmt::format("cd {} && {} {} ckpt export ckpt --out hf && /usr/bin/python3 {} "
                                             "hf/model.safetensors hf/working.safetensors && mv hf/working.safetensors "
                                             "hf/model.safetensors",
                                             dir, without_parent_mpi_env(), trident_binary(), TRIDENT_WORKING_COPY_VALUES);
  ASSERT_EQ(run_command(export_cmd, &log), 0) << export_cmd << "\n" << log;
  const std::string sampling =
      "--prompt 'The ' --max-new-tokens 12 --samples 3 --temperature 1 --seed 7 --set train.precision=bf16";
  const CommandRun exported =
      run_generate(dir, 1, sampling + " --checkpoint hf --set train.bf16_parameters=false --json exported.json");
  ASSERT_EQ(exported.rc, 0) << exported.out;
  const auto want = read_json(dir + "/exported.json").at("samples");
  for (int np : {1, 2}) {
    const std::string json = fmt::format("working_copy_{}.json", np);
    const CommandRun r = run_generate(dir, np, sampling + " --set checkpoint.dir=ckpt --json " + json);
    ASSERT_EQ(r.rc, 0) << r.out;
    EXPECT_EQ(read_json(dir + "/" + json).at("samples"), want) << np << " rank(s)";
  }
  // Three steps barely move the biases and LayerNorms, so the samples would be the same had they been
  // rounded; the loss over a text sees them: `trident eval` of the checkpoint (its working copy) equals
  // that of the rounded export bit for bit, and differs from that of the all-bf16 export.
  const auto eval_loss = [&](const std::string& args) {
    const CommandRun r = run_trident(dir, 1, "eval deck.toml --data /usr/share/common-licenses/GPL-2 "
                                             "--set train.precision=bf16 --json eval.json " + args);
    EXPECT_EQ(r.rc, 0) << r.out;
    return read_json(dir + "/eval.json").at("loss").get<double>();
  };
  const std::string bf16_export = fmt::format("cd {} && {} {} ckpt export ckpt --dtype bf16 --out hf16", dir,
                                              without_parent_mpi_env(), trident_binary());
  ASSERT_EQ(run_command(bf16_export, &log), 0) << bf16_export << "\n" << log;
  const double working_copy = eval_loss("--set checkpoint.dir=ckpt");
  const double values = eval_loss("--set model.init_from=hf/model.safetensors --set train.bf16_parameters=false");
  const double all_bf16 = eval_loss("--set model.init_from=hf16/model.safetensors --set train.bf16_parameters=false");
  EXPECT_EQ(working_copy, values);
  EXPECT_NE(all_bf16, values) << "rounding the biases and LayerNorms changes nothing: the check above tells nothing";
  fs::remove_all(dir);
}

// Samples at every sample_every-th step, in the log and the metrics, reproducible, and the same under ZeRO-3
// at dp 2 (the gathered parameters equal the serial run's up to rounding a sample never sees).
TEST(TrainSamples, PrintedAndWrittenToTheMetrics) {
  const std::vector<std::string> sets = {"train.steps=4", "train.sample_every=2", "train.sample_tokens=8",
                                         "train.sample_prompt=The"};
  const TrainOutput first = run_train(1, kTinyTextDeck, sets);
  ASSERT_EQ(first.rc, 0) << first.out;
  ASSERT_EQ(first.steps.size(), 4u);
  EXPECT_FALSE(first.steps[0].contains("sample"));
  EXPECT_FALSE(first.steps[2].contains("sample"));
  for (const size_t i : {1u, 3u}) {
    ASSERT_TRUE(first.steps[i].contains("sample")) << first.steps[i].dump();
    const std::string text = first.steps[i].at("sample").get<std::string>();
    EXPECT_EQ(text.rfind("The", 0), 0u) << text;
    EXPECT_GE(text.size(), 3u + 8u) << "8 byte tokens after the prompt (U+FFFD may stand for a byte)";
    EXPECT_THAT(first.out, HasSubstr(fmt::format("sample at step {}:\n---\n{}", i + 1, text)));
  }
  const TrainOutput again = run_train(1, kTinyTextDeck, sets);
  ASSERT_EQ(again.rc, 0) << again.out;
  EXPECT_EQ(again.steps[3].at("sample"), first.steps[3].at("sample"));
  std::vector<std::string> zero3 = sets;
  zero3.insert(zero3.end(), {"mesh.dp=2", "mesh.zero=3"});
  const TrainOutput sharded = run_train(2, kTinyTextDeck, zero3);
  ASSERT_EQ(sharded.rc, 0) << sharded.out;
  ASSERT_EQ(sharded.steps.size(), 4u);
  EXPECT_EQ(sharded.steps[3].at("sample"), first.steps[3].at("sample"));
  fs::remove_all(first.dir);
  fs::remove_all(again.dir);
  fs::remove_all(sharded.dir);
}

}  // namespace
}  // namespace trident::test
