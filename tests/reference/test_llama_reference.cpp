// trident's Llama-shaped models against an independent PyTorch reference (llama_reference.py, float64,
// Debian python3-torch), as test_reference.cpp does for GPT-2.
//
// Python writes random Llama weights (Hugging Face LlamaForCausalLM names) with a config.json and an
// llm.c token shard; trident reads the weights through its deck (model.architecture = "llama",
// init_from) and the tokens through its data pipeline. Expected values, all from Python in float64:
//   * the loss and every parameter gradient of one batch, on odd shapes (6 query heads of size 24 over
//     2 key/value heads, vocabulary 997 padded, MLP width 200, rope_theta 5000, rms eps 1e-4), untied;
//     and multi-query attention with biases and a tied head; recompute none / selective / full;
//   * the logits of that batch (through the KV-cache decoder, which shares no code path with the
//     training forward but the kernels);
//   * 5 AdamW steps: per-step losses;
//   * greedy decoding through the KV cache (RoPE applied to the cached keys at their positions);
//   * model.init_from's config.json must describe the deck's model (rope_theta, kv heads, eps, ...);
//   * the export: save_hf_safetensors, read back by Python, equals the input bit for bit; weights
//     split into shards with an index json load as the single file does; and `ckpt export` of a trained
//     checkpoint, whose config.json Python reads, gives Python the loss trident computes.
// Tolerances: the loss and the logits within 1e-5 relative (float32 forward against float64); each
// gradient tensor within 1e-5 relative, norm-wise (float32 sums over 128 positions; measured ~1e-6);
// the 5-step losses within 1e-5 relative. Measured errors are printed ("[llama-reference] ...").
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/test_support.hpp"
#include "reference/reference_script.hpp"
#include "data/dataset.hpp"
#include "deck/deck.hpp"
#include "generate/decoder.hpp"
#include "kernels.hpp"
#include "model/gpt.hpp"
#include "model/hf_config.hpp"
#include "model/parameters.hpp"
#include "model/shapes.hpp"
#include "safetensors/safetensors.hpp"
#include "train/trainer.hpp"

namespace trident {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kScript = TRIDENT_LLAMA_REFERENCE_SCRIPT;

constexpr double kLossTol = 1e-5;
constexpr double kGradTol = 1e-5;
constexpr double kLogitTol = 1e-5;

struct Spec {
  std::string name;
  int64_t V, T, L, C, NH, KVH, F;
  double theta, eps;
  bool tied, bias;
  int64_t pad_to, B;
  int seed;
};

// Odd shapes: 6 heads of 24 sharing 2 key/value heads, a prime vocabulary padded to 1024 rows.
const Spec kGqa{"gqa-6x24-kv2", 997, 32, 2, 144, 6, 2, 200, 5000.0, 1e-4, false, false, 64, 4, 1};
// Multi-query attention (one key/value head), biases everywhere, a tied head.
const Spec kMqaBias{"mqa-bias-tied", 997, 32, 2, 96, 4, 1, 160, 20000.0, 1e-5, true, true, 8, 4, 3};

std::string key(const Spec& s) { return fmt::format("{}_s{}", s.name, s.seed); }

class LlamaReference : public testing::Test {
 public:
  static void SetUpTestSuite() {
    missing_ = test::missing_python_modules({"torch", "numpy"});
    if (!missing_.empty()) return;
    dir_ = test::make_temp_dir("trident-llama-reference");
    kernels_ = make_kokkos_kernels().release();
  }
  static void TearDownTestSuite() {
    delete kernels_;
    kernels_ = nullptr;
    if (!dir_.empty() && !std::getenv("TRIDENT_KEEP_REFERENCE_FILES")) {
      std::error_code ec;
      fs::remove_all(dir_, ec);
    }
  }
  void SetUp() override {
    if (!missing_.empty()) FAIL() << "the PyTorch reference needs Debian's python3-torch: " << missing_;
  }

  static std::string path(const std::string& name) { return dir_ + "/" + name; }

  static json python(const std::string& args) { return test::run_reference_script(kScript, args); }

  static std::string weights(const Spec& s) {
    const std::string p = path(key(s) + ".safetensors");
    if (!fs::exists(p))
      python(fmt::format("make-weights --out {} --config-out {} --vocab {} --seq {} --layers {} --hidden {} --heads {} "
                         "--kv-heads {} --ffn {} --theta {} --eps {} --seed {}{}{}",
                         p, config(s), s.V, s.T, s.L, s.C, s.NH, s.KVH, s.F, s.theta, s.eps, s.seed,
                         s.tied ? "" : " --untied", s.bias ? " --bias" : ""));
    return p;
  }
  static std::string config(const Spec& s) { return path(key(s) + ".config.json"); }

  static std::string data(int64_t vocab) {
    const std::string p = path(fmt::format("tokens_V{}.bin", vocab));
    if (!fs::exists(p)) python(fmt::format("make-data --out {} --vocab {} --tokens 6000 --seed 7", p, vocab));
    return p;
  }

  // The deck of spec s reading `init_from` (its reference weights by default).
  static std::string model_deck(const Spec& s, const std::string& recompute, std::string init_from = "") {
    if (init_from.empty()) init_from = weights(s);
    return fmt::format(
        "[model]\narchitecture = \"llama\"\nvocab_size = {}\nseq_len = {}\nlayers = {}\nhidden = {}\nheads = {}\n"
        "kv_heads = {}\nffn_hidden = {}\nrope_theta = {}\nnorm_eps = {}\ntie_embeddings = {}\nbias = {}\n"
        "vocab_pad_to = {}\ninit_from = \"{}\"\n[train]\nrecompute = \"{}\"\n",
        s.V, s.T, s.L, s.C, s.NH, s.KVH, s.F, s.theta, s.eps, s.tied, s.bias, s.pad_to, init_from, recompute);
  }

  static Kernels& kernels() { return *kernels_; }

  static inline std::string missing_, dir_;
  static inline Kernels* kernels_ = nullptr;
};

// ||a - r|| / ||r|| of trident's stored tensor (unpadded part) against the reference's; padding rows zero.
double tensor_rel_err(const SafetensorsReader& ref, const ParamTensor& t, const GptShapes& s, const float* host) {
  const float* a = host + t.offset;
  const std::vector<int64_t> shape = hf_shape(t, s);
  const std::vector<float> r = ref.read_f32(t.name, shape);
  double d2 = 0, r2 = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    d2 += (double(a[i]) - r[i]) * (double(a[i]) - r[i]);
    r2 += double(r[i]) * r[i];
  }
  int64_t nonzero_padding = 0;
  for (int64_t i = int64_t(r.size()); i < t.numel; ++i) nonzero_padding += a[i] != 0.0f;
  EXPECT_EQ(nonzero_padding, 0) << t.name << ": vocabulary padding rows are not zero";
  EXPECT_GT(r2, 0.0) << t.name << ": the reference gradient is zero, so the check would be empty";
  return std::sqrt(d2 / r2);
}

// The batch of step 0 as trident's data pipeline cuts it.
void step0_batch(const Spec& s, std::vector<int32_t>& inputs, std::vector<int32_t>& targets) {
  auto stream = open_token_stream(DataFormat::LlmC, LlamaReference::data(s.V), s.V);
  BatchSampler sampler(*stream, DataOrder::Sequential, 0, s.T, s.B);
  inputs.assign(s.B * s.T, 0);
  targets.assign(s.B * s.T, 0);
  for (int64_t j = 0; j < s.B; ++j) sampler.sample(0, j, inputs.data() + j * s.T, targets.data() + j * s.T);
}

// Parameters of spec s's deck (init_from) on the host, through a whole-model layout.
std::vector<float> load_weights(const Config& cfg, const ParameterLayout& layout) {
  std::vector<float> host(layout.total());
  load_hf_safetensors(layout, cfg.model.init_from, host.data());
  return host;
}

void check_gradients(const Spec& s, const std::string& recompute) {
  SCOPED_TRACE(s.name + ", recompute " + recompute);
  const Config cfg = parse_deck(LlamaReference::model_deck(s, recompute), "llama.toml");
  const std::string gpath = LlamaReference::path(fmt::format("grads_{}.safetensors", key(s)));
  const std::string jpath = gpath + ".json";
  if (!fs::exists(jpath))
    LlamaReference::python(fmt::format("grads --weights {} --config {} --data {} --batch {} --out {} --json {}",
                                       cfg.model.init_from, LlamaReference::config(s), LlamaReference::data(s.V), s.B,
                                       gpath, jpath));
  std::ifstream jfile(jpath);
  const json ref = json::parse(jfile);

  const GptShapes shapes = GptShapes::from(cfg.model);
  Kernels& k = LlamaReference::kernels();
  GptModel model(shapes, k, cfg.train.recompute, s.B);
  const std::vector<float> host = load_weights(cfg, model.layout());
  k.copy_to_device(model.params(), host.data(), model.layout().total());
  k.fill(model.grads(), 0.f, model.layout().total());
  std::vector<int32_t> inputs, targets;
  step0_batch(s, inputs, targets);
  const double positions = double(s.B * s.T);
  const double loss = model.forward_backward(inputs.data(), targets.data(), float(1.0 / positions)) / positions;
  std::vector<float> grads(model.layout().total());
  k.copy_to_host(grads.data(), model.grads(), model.layout().total());

  const double ref_loss = ref.at("loss").get<double>();
  const double loss_err = std::abs(loss - ref_loss) / ref_loss;
  EXPECT_LE(loss_err, kLossTol) << "loss " << loss << " vs reference " << ref_loss;
  const SafetensorsReader gref(gpath);
  double worst = 0;
  std::string worst_name;
  std::vector<std::string> seen;
  for (const auto& t : model.layout().tensors()) {
    const double err = tensor_rel_err(gref, t, shapes, grads.data());
    EXPECT_LE(err, kGradTol) << "gradient of " << t.name;
    if (err > worst) worst = err, worst_name = t.name;
    seen.push_back(t.name);
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, gref.names()) << "trident's tensors are the reference's";
  std::printf("[llama-reference] %-14s recompute %-9s loss %.9f (ref %.9f) rel err %.2e | max grad rel err %.2e (%s)\n",
              s.name.c_str(), recompute.c_str(), loss, ref_loss, loss_err, worst, worst_name.c_str());
}

TEST_F(LlamaReference, ReferenceSelfTest) {
  const json r = python("selftest");
  EXPECT_TRUE(r.at("ok").get<bool>()) << r.dump(1);
}

TEST_F(LlamaReference, LossAndGradientsGqaRecomputeNone) { check_gradients(kGqa, "none"); }
TEST_F(LlamaReference, LossAndGradientsGqaRecomputeSelective) { check_gradients(kGqa, "selective"); }
TEST_F(LlamaReference, LossAndGradientsGqaRecomputeFull) { check_gradients(kGqa, "full"); }
TEST_F(LlamaReference, LossAndGradientsMultiQueryWithBiasesTied) { check_gradients(kMqaBias, "none"); }

// The logits of the step-0 batch, every position, through the KV-cache decoder fed all at once.
TEST_F(LlamaReference, LogitsOfOneBatch) {
  const Spec s = kGqa;
  const Config cfg = parse_deck(model_deck(s, "none"), "llama.toml");
  const std::string out = path("logits_" + key(s) + ".safetensors");
  python(fmt::format("logits --weights {} --config {} --data {} --batch {} --out {}", cfg.model.init_from, config(s),
                     data(s.V), s.B, out));
  const std::vector<float> ref = SafetensorsReader(out).read_f32("logits", {s.B, s.T, s.V});
  const GptShapes shapes = GptShapes::from(cfg.model);
  const ParameterLayout layout(shapes);
  const std::vector<float> host = load_weights(cfg, layout);
  float* params = kernels().alloc(layout.total());
  kernels().copy_to_device(params, host.data(), layout.total());
  std::vector<int32_t> inputs, targets;
  step0_batch(s, inputs, targets);
  Decoder decoder(shapes, layout, params, kernels(), nullptr, s.B, s.T);
  const std::vector<float> logits = decoder.feed(inputs.data(), s.T, true);
  kernels().free(params);
  ASSERT_EQ(logits.size(), ref.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    worst = std::max(worst, std::abs(double(logits[i]) - ref[i]));
    scale = std::max(scale, std::abs(double(ref[i])));
  }
  EXPECT_LE(worst, kLogitTol * scale) << "largest logit " << scale;
  std::printf("[llama-reference] logits of %lld positions within %.2e (largest %.2f)\n", (long long)(s.B * s.T), worst,
              scale);
}

// 5 AdamW steps with warm-up, cosine decay, accumulation over 2 micro-batches and clipping.
TEST_F(LlamaReference, FiveAdamWSteps) {
  const Spec s = kGqa;
  const int64_t steps = 5;
  const std::string tokens = data(s.V);
  const std::string deck =
      model_deck(s, "selective") +
      fmt::format("steps = {}\nmicro_batch = 2\nglobal_batch = 4\nlr = 3e-3\nmin_lr = 3e-4\nwarmup_steps = 2\n"
                  "grad_clip = 6.5\n[data]\nformat = \"llmc\"\npath = \"{}\"\n[runtime]\npeak_tflops = 1.0\n",
                  steps, tokens);
  const Config cfg = parse_deck(deck, "llama-train.toml");
  const json ref = python(fmt::format(
      "train --weights {} --config {} --data {} --steps {} --global-batch 4 --micro-batch 2 --lr 3e-3 --min-lr 3e-4 "
      "--warmup 2 --schedule cosine --weight-decay {} --beta1 {} --beta2 {} --eps {} --grad-clip 6.5",
      cfg.model.init_from, config(s), tokens, steps, cfg.train.weight_decay, cfg.train.beta1, cfg.train.beta2,
      cfg.train.eps));
  Trainer trainer(cfg, kernels());
  double worst = 0;
  for (int64_t step = 1; step <= steps; ++step) {
    const StepMetrics m = trainer.train_step(step);
    const auto& r = ref.at("steps").at(step - 1);
    const double err = std::abs(m.loss - r.at("loss").get<double>()) / r.at("loss").get<double>();
    worst = std::max(worst, err);
    EXPECT_LE(err, kLossTol) << "step " << step;
    EXPECT_EQ(m.grad_norm > 6.5, r.at("clipped").get<bool>()) << "step " << step;
    std::printf("[llama-reference] step %lld loss %.8f (ref %.8f) grad norm %.4f (ref %.4f)\n", (long long)step, m.loss,
                r.at("loss").get<double>(), m.grad_norm, r.at("grad_norm").get<double>());
  }
  EXPECT_LT(ref.at("steps").at(steps - 1).at("loss").get<double>(), ref.at("steps").at(0).at("loss").get<double>() - 0.2)
      << "the run should learn something";
}

// Greedy decoding through the KV cache against the reference's full recomputation.
TEST_F(LlamaReference, GreedyDecodingWithKvCache) {
  const Spec s = kGqa;
  const int64_t steps = 20;
  const std::string ref_file = path("greedy_" + key(s) + ".json");
  const json summary = python(fmt::format("greedy --weights {} --config {} --prompt 3,1,4,1,5 --new {} --json {}",
                                          weights(s), config(s), steps, ref_file));
  ASSERT_GT(summary.at("min_margin").get<double>(), 1e-3) << "a near-tie would make argmax fragile";
  std::ifstream f(ref_file);
  const json ref = json::parse(f);
  const Config cfg = parse_deck(model_deck(s, "none"), "llama.toml");
  const GptShapes shapes = GptShapes::from(cfg.model);
  const ParameterLayout layout(shapes);
  const std::vector<float> host = load_weights(cfg, layout);
  float* params = kernels().alloc(layout.total());
  kernels().copy_to_device(params, host.data(), layout.total());
  Decoder decoder(shapes, layout, params, kernels(), nullptr, 1, s.T);
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5};
  std::vector<float> logits = decoder.feed(prompt.data(), int64_t(prompt.size()));
  double worst = 0;
  for (int64_t i = 0; i < steps; ++i) {
    const auto& want = ref.at("steps").at(i).at("logits");
    for (int64_t v = 0; v < s.V; ++v) worst = std::max(worst, std::abs(double(logits[v]) - want.at(v).get<double>()));
    const int32_t token = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    ASSERT_EQ(token, ref.at("tokens").at(i).get<int32_t>()) << "step " << i;
    if (i + 1 < steps) logits = decoder.feed(&token, 1);
  }
  kernels().free(params);
  EXPECT_LE(worst, kLogitTol * 10);  // logits of magnitude up to ~10
  std::printf("[llama-reference] greedy: %lld tokens equal, logits within %.2e\n", (long long)steps, worst);
}

// save_hf_safetensors of the loaded weights equals the file bit for bit; the same weights split into two
// shards with a model.safetensors.index.json load to the same values as the single file.
TEST_F(LlamaReference, ExportRoundTripAndShardedLoad) {
  for (const Spec& s : {kGqa, kMqaBias}) {
    SCOPED_TRACE(s.name);
    const Config cfg = parse_deck(model_deck(s, "none"), "llama.toml");
    const ParameterLayout layout(GptShapes::from(cfg.model));
    const std::vector<float> host = load_weights(cfg, layout);
    const std::string out = path("export_" + key(s) + ".safetensors");
    save_hf_safetensors(layout, host.data(), out);
    const json r = python(fmt::format("compare {} {}", cfg.model.init_from, out));
    EXPECT_TRUE(r.at("equal").get<bool>()) << r.dump(1);

    const std::string dir = path("sharded_" + key(s));
    fs::create_directories(dir);
    const SafetensorsReader whole(cfg.model.init_from);
    std::vector<std::vector<float>> data[2];
    std::vector<SafetensorsTensor> shard[2];
    json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", json::object()}};
    const auto names = whole.names();
    for (size_t i = 0; i < names.size(); ++i) {
      const int part = i % 2;
      data[part].push_back(whole.read_f32(names[i], whole.shape(names[i])));
      index["weight_map"][names[i]] = fmt::format("model-0000{}-of-00002.safetensors", part + 1);
    }
    for (int part = 0; part < 2; ++part) {
      size_t j = 0;
      for (size_t i = part; i < names.size(); i += 2) shard[part].push_back({names[i], whole.shape(names[i]), data[part][j++].data()});
      write_safetensors(fmt::format("{}/model-0000{}-of-00002.safetensors", dir, part + 1), shard[part], {});
    }
    test::write_file(dir + "/model.safetensors.index.json", index.dump(1));
    for (const std::string& from : {dir, dir + "/model.safetensors.index.json"}) {
      std::vector<float> sharded(layout.total());
      load_hf_safetensors(layout, from, sharded.data());
      EXPECT_EQ(sharded, host) << from;
    }
  }
}

// `trident train` writes a checkpoint, `ckpt export` makes a Hugging Face directory; the reference reads
// its config.json (heads, kv heads, theta, eps, tying) and weights and computes the loss trident gets
// from the same exported weights.
TEST_F(LlamaReference, CkptExportIsReadByTheReference) {
  const Spec s = kGqa;
  const std::string tokens = data(s.V);
  const std::string deck = path("export_train.toml");
  test::write_file(deck, model_deck(s, "none") +
                             fmt::format("steps = 2\nglobal_batch = 4\nlr = 1e-3\n[data]\nformat = \"llmc\"\npath = "
                                         "\"{}\"\n[checkpoint]\ndir = \"{}\"\nevery_steps = 2\n",
                                         tokens, path("export_ckpt")));
  std::string log;
  const std::string train = fmt::format("{} OPENBLAS_NUM_THREADS=1 timeout -k 5 300 {} train {}",
                                        test::without_parent_mpi_env(), test::trident_binary(), deck);
  ASSERT_EQ(test::run_command(train, &log), 0) << log;
  const std::string hf = path("export_hf");
  ASSERT_EQ(test::run_command(fmt::format("{} {} ckpt export {} --out {}", test::without_parent_mpi_env(),
                                          test::trident_binary(), path("export_ckpt"), hf),
                              &log),
            0)
      << log;
  std::ifstream cf(hf + "/config.json");
  const json config = json::parse(cf);
  EXPECT_EQ(config.at("architectures").at(0), "LlamaForCausalLM");
  EXPECT_EQ(config.at("num_key_value_heads").get<int64_t>(), s.KVH);
  EXPECT_DOUBLE_EQ(config.at("rope_theta").get<double>(), s.theta);
  EXPECT_DOUBLE_EQ(config.at("rms_norm_eps").get<double>(), s.eps);
  const json ref = python(fmt::format("grads --weights {}/model.safetensors --data {} --batch {} --out {}", hf, tokens,
                                      s.B, path("export_grads.safetensors")));
  const Config cfg = parse_deck(model_deck(s, "none", hf + "/model.safetensors"), "llama.toml");
  GptModel model(GptShapes::from(cfg.model), kernels(), Recompute::None, s.B);
  const std::vector<float> host = load_weights(cfg, model.layout());
  kernels().copy_to_device(model.params(), host.data(), model.layout().total());
  std::vector<int32_t> inputs, targets;
  step0_batch(s, inputs, targets);
  const double loss = model.forward_loss(inputs.data(), targets.data()) / double(s.B * s.T);
  const double ref_loss = ref.at("loss").get<double>();
  EXPECT_LE(std::abs(loss - ref_loss) / ref_loss, kLossTol) << loss << " vs reference " << ref_loss;
  std::printf("[llama-reference] exported model: loss %.8f, reference %.8f\n", loss, ref_loss);
}


// model.init_from's config.json against the deck: the matching deck passes; a different rope_theta,
// kv_heads or norm_eps, a rope_scaling, or a GPT-2 deck are refused naming the key and both values.
TEST_F(LlamaReference, InitFromConfigMustDescribeTheDecksModel) {
  const Spec s = kGqa;
  const std::string dir = path("hf_dir");
  fs::create_directories(dir);
  fs::copy_file(weights(s), dir + "/model.safetensors", fs::copy_options::overwrite_existing);
  std::ifstream in(config(s));
  json config = json::parse(in);
  test::write_file(dir + "/config.json", config.dump(1));
  const auto refusal = [&](const std::vector<std::string>& sets) -> std::string {
    const Config cfg = parse_deck(model_deck(s, "none", dir), "llama.toml", sets);
    try {
      check_hf_config(cfg.model, cfg.model.init_from);
    } catch (const Error& e) {
      return e.what();
    }
    return "<accepted>";
  };
  EXPECT_EQ(refusal({}), "<accepted>");
  EXPECT_EQ(hf_config_path(dir + "/model.safetensors"), dir + "/config.json");
  EXPECT_THAT(refusal({"model.rope_theta=10000"}), testing::HasSubstr("rope_theta = 5000, but [model] rope_theta = 10000"));
  EXPECT_THAT(refusal({"model.kv_heads=3"}), testing::HasSubstr("num_key_value_heads = 2, but [model] kv_heads = 3"));
  EXPECT_THAT(refusal({"model.norm_eps=1e-5"}), testing::HasSubstr("rms_norm_eps = 0.0001, but [model] norm_eps = 1e-05"));
  EXPECT_THAT(refusal({"model.architecture=gpt2", "model.norm=layernorm", "model.positions=learned", "model.mlp=gelu",
                       "model.bias=true", "model.kv_heads=6"}),
              testing::HasSubstr("model_type \"llama\", but [model] architecture = \"gpt2\""));
  config["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  test::write_file(dir + "/config.json", config.dump(1));
  EXPECT_THAT(refusal({}), testing::HasSubstr("scaled rotary embeddings are not supported"));
}

}  // namespace
}  // namespace trident
