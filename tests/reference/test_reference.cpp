// trident against an independent PyTorch reference of GPT-2 (gpt2_reference.py, Debian python3-torch).
//
// Python writes random GPT-2 weights (Hugging Face names, Conv1D layout) and an llm.c token shard;
// both sides read the same files, trident through its deck (init_from) and data pipeline, Python
// through its own safetensors / llm.c readers and its own batch formula. Python computes, in float64:
//   * the loss and every parameter gradient of one batch: trident's (float32) must match the loss
//     within 1e-5 relative and each gradient tensor within 1e-4 relative, norm-wise
//     (||g - g_ref|| / ||g_ref||), for the GPT-2 vocabulary, a prime vocabulary padded to a multiple
//     of 64, an untied LM head, and recompute none / full / selective;
//   * 10 steps of torch.optim.AdamW with warm-up + cosine decay, gradient accumulation over
//     micro-batches and clip_grad_norm_ (triggered on some steps): per-step losses within 1e-4;
//   * the export: save_hf_safetensors output, read back by Python, equals the input weights bit for bit.
// Every expected value comes from Python; nothing is pasted from trident's output. The measured
// errors are printed ("[reference] ...") so regressions in accuracy show before they fail.
//
// The Python side needs /usr/bin/python3 with torch and numpy, which `make test` installs; without them
// every test here fails with that message (a skip would read as a pass).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/test_support.hpp"
#include "reference/reference_script.hpp"
#include "data/dataset.hpp"
#include "generate/decoder.hpp"
#include "deck/deck.hpp"
#include "safetensors/safetensors.hpp"
#include "kernels.hpp"
#include "model/gpt.hpp"
#include "model/parameters.hpp"
#include "model/shapes.hpp"
#include "train/trainer.hpp"

namespace trident {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kScript = TRIDENT_REFERENCE_SCRIPT;

constexpr double kLossTol = 1e-5;       // relative, one batch
constexpr double kGradTol = 1e-4;       // relative, norm-wise per tensor
constexpr double kTrainLossTol = 1e-4;  // relative, per step of the 10-step run

// A GPT-2 configuration and the batch size of one gradient evaluation.
struct Spec {
  std::string name;
  int64_t V, T, L, C, NH, F;
  bool tied;
  int64_t pad_to;
  int64_t B;
  int seed;
};

std::string weights_key(const Spec& s) {
  return fmt::format("w_V{}_T{}_L{}_C{}_NH{}_F{}_{}_s{}", s.V, s.T, s.L, s.C, s.NH, s.F, s.tied ? "tied" : "untied",
                     s.seed);
}

class Reference : public testing::Test {
 public:
  static void SetUpTestSuite() {
    missing_ = test::missing_python_modules({"torch", "numpy"});
    if (!missing_.empty()) return;
    std::string out;
    test::run_command(test::shell_quoted(test::reference_python()) + " -c 'import torch; print(torch.__version__)'", &out);
    std::printf("[reference] %s with torch %s", test::reference_python().c_str(), out.c_str());
    dir_ = test::make_temp_dir("trident-reference");
    kernels_ = make_kokkos_kernels().release();
  }

  static void TearDownTestSuite() {
    delete kernels_;
    kernels_ = nullptr;
    if (!dir_.empty() && !std::getenv("TRIDENT_KEEP_REFERENCE_FILES")) {
      std::error_code ec;
      fs::remove_all(dir_, ec);
    }
    dir_.clear();
  }

  void SetUp() override {
    if (!missing_.empty()) FAIL() << "the PyTorch reference needs Debian's python3-torch: " << missing_;
  }

  static std::string path(const std::string& name) { return dir_ + "/" + name; }

  // Runs the reference script; returns the JSON summary it prints last. Fails the test otherwise.
  // Runs the reference script; returns the JSON summary it prints last. Fails the test otherwise.
  static json python(const std::string& args) { return test::run_reference_script(kScript, args); }

  static std::string weights(const Spec& s) {
    const std::string p = path(weights_key(s) + ".safetensors");
    if (!fs::exists(p))
      python(fmt::format("make-weights --out {} --vocab {} --seq {} --layers {} --hidden {} --heads {} --ffn {} "
                         "--seed {}{}",
                         p, s.V, s.T, s.L, s.C, s.NH, s.F, s.seed, s.tied ? "" : " --untied"));
    return p;
  }

  static std::string data(int64_t vocab) {
    const std::string p = path(fmt::format("tokens_V{}.bin", vocab));
    if (!fs::exists(p)) python(fmt::format("make-data --out {} --vocab {} --tokens 6000 --seed 7", p, vocab));
    return p;
  }

  static std::string model_deck(const Spec& s, const std::string& recompute) {
    return fmt::format(
        "[model]\nvocab_size = {}\nseq_len = {}\nlayers = {}\nhidden = {}\nheads = {}\nffn_hidden = {}\n"
        "tie_embeddings = {}\nvocab_pad_to = {}\ninit_from = \"{}\"\n"
        "[train]\nrecompute = \"{}\"\n",
        s.V, s.T, s.L, s.C, s.NH, s.F, s.tied ? "true" : "false", s.pad_to, weights(s), recompute);
  }

  static Kernels& kernels() { return *kernels_; }

  static inline std::string missing_;
  static inline std::string dir_;
  static inline Kernels* kernels_ = nullptr;
};

// The reference tensor `t` (Hugging Face layout, read from `ref`) against trident's stored tensor at
// `host + t.offset`: returns ||a - r|| / ||r|| over the real (unpadded) part; checks that vocabulary
// padding rows are exactly zero.
double tensor_rel_err(const SafetensorsReader& ref, const ParamTensor& t, const GptShapes& s, const float* host,
                      double* ref_norm = nullptr) {
  const float* a = host + t.offset;
  std::vector<int64_t> hf = t.shape;
  const bool padded = t.name == "transformer.wte.weight" || t.name == "lm_head.weight";  // [Vp, C] stored
  if (t.conv1d) hf = {t.shape[1], t.shape[0]};
  if (padded) hf[0] = s.V;
  const std::vector<float> r = ref.read_f32(t.name, hf);
  double d2 = 0, r2 = 0;
  if (t.conv1d) {  // trident [out, in] vs Hugging Face [in, out]
    const int64_t in = hf[0], out = hf[1];
    for (int64_t i = 0; i < in; ++i)
      for (int64_t o = 0; o < out; ++o) {
        const double rv = r[i * out + o], d = double(a[o * in + i]) - rv;
        d2 += d * d;
        r2 += rv * rv;
      }
  } else {
    for (size_t i = 0; i < r.size(); ++i) {
      const double d = double(a[i]) - double(r[i]);
      d2 += d * d;
      r2 += double(r[i]) * double(r[i]);
    }
  }
  if (padded) {
    int64_t nonzero = 0;
    for (int64_t i = int64_t(r.size()); i < t.numel; ++i) nonzero += a[i] != 0.0f;
    EXPECT_EQ(nonzero, 0) << t.name << ": vocabulary padding rows are not zero";
  }
  if (ref_norm) *ref_norm = std::sqrt(r2);
  return std::sqrt(d2) / std::sqrt(r2);
}

// The key third of the fused QKV bias, [C, 2C) of attn.c_attn.bias, has an exactly zero gradient:
// it adds q . b_k to every score of a query's row, and softmax ignores a constant shift. Its computed
// gradient is pure round-off (measured: ~3e-8 of the q and v parts' norm in trident's float32, far less
// in the float64 reference), which AdamW then normalises into updates of up to ~lr per step, different
// on the two sides. So the key bias cannot be compared after
// training; the test checks instead that its gradient is round-off on both sides.
bool is_qkv_bias(const ParamTensor& t) {
  const std::string suffix = "attn.c_attn.bias";
  return t.name.size() >= suffix.size() && t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// ||a - r|| / ||r|| over elements [begin, end) of a 1-D tensor, and ||r||, ||a|| there.
struct SliceErr {
  double rel, ref_norm, norm;
};
SliceErr slice_err(const float* a, const std::vector<float>& r, int64_t begin, int64_t end) {
  double d2 = 0, r2 = 0, a2 = 0;
  for (int64_t i = begin; i < end; ++i) {
    d2 += (double(a[i]) - r[i]) * (double(a[i]) - r[i]);
    r2 += double(r[i]) * r[i];
    a2 += double(a[i]) * a[i];
  }
  return {std::sqrt(d2 / r2), std::sqrt(r2), std::sqrt(a2)};
}

// bf16 GEMM operands (train.matmul_precision = "bf16") against the reference's rounded operands
// (gpt2_reference.py --matmul-precision bf16, float64 sums). trident's fp32 values differ from the
// float64 ones by ~1e-7 relative, which flips the bf16 rounding of the rare operand element that lies
// that close to a rounding boundary: one unit of 2^-8, RMS ~sqrt(1e-7 2^-8) ~ 2e-5 per GEMM, compounding
// through the layers (test_matmul_precision_parallel.cpp). The reference's own float32 run lands as far
// from its float64 run (printed as "fp32 torch": loss 3.6e-6, gradients 2.8e-3 on prime-509). Measured
// for trident: loss 6.1e-6 and 1.6e-9, worst gradient 2.6e-3 and 6.9e-4 (prime-509, untied); bounds 2e-5
// and 4e-3. What bf16 itself changes, float64 reference against float64 reference (prime-509): gradients
// 2.3e-3 to 9.2e-3 per tensor (median 7.1e-3), the loss 7.1e-6; at initialisation the loss hardly tells
// the two apart, the gradients do (and tests/kernels/test_matmul_precision.cpp proves the rounding).
constexpr double kBf16LossTol = 2e-5;
constexpr double kBf16GradTol = 4e-3;
// With attention's operands rounded too (head size 64, kernels.hpp attention_follows_bf16) every layer
// rounds more operands (q, k, v, P, dout, dS), and more of them lie close enough to a rounding boundary
// to flip: the reference's own float32 run lands 2.1e-5 (loss) and 4.6e-3 (gradients) from its float64
// run on head64-prime-509; trident measured 2.1e-5 and 4.6e-3. Bounds 5e-5 and 1e-2. A reference that
// rounded the normalised probabilities instead of the online softmax's unnormalised ones (a different
// rounding of every P) was 4.0e-5 and 1.3e-2 away.
constexpr double kBf16AttentionLossTol = 5e-5;
constexpr double kBf16AttentionGradTol = 1e-2;

// Sets a Kernels' matmul precision for a scope (the reference kernels are shared by every test).
struct MatmulPrecisionScope {
  Kernels& k;
  MatmulPrecisionScope(Kernels& kernels, MatmulPrecision p) : k(kernels) { k.set_matmul_precision(p); }
  ~MatmulPrecisionScope() { k.set_matmul_precision(MatmulPrecision::FP32); }
};

// One batch: trident's loss and gradients against the float64 reference.
// storage BF16: train.precision = "bf16" (bf16 operands and bf16-stored activations; matmul must be BF16).
void check_gradients(const Spec& s, const std::string& recompute, MatmulPrecision matmul = MatmulPrecision::FP32,
                     Precision storage = Precision::FP32) {
  SCOPED_TRACE(s.name + ", recompute " + recompute + ", matmul " + to_string(matmul) + ", precision " +
               to_string(storage));
  const bool bf16 = matmul == MatmulPrecision::BF16;
  const Config cfg = parse_deck(Reference::model_deck(s, recompute), "reference.toml");
  const std::string tokens = Reference::data(s.V);

  // Expected: Python, float64.
  // (computed once per model and batch; the recompute modes share it)
  const std::string gpath =
      Reference::path(fmt::format("grads_{}_{}_{}_{}.safetensors", weights_key(s), s.B, to_string(matmul),
                                  to_string(storage)));
  const std::string jpath = gpath + ".json";
  if (!fs::exists(jpath))
    Reference::python(fmt::format("grads --weights {} --data {} --heads {} --batch {} --matmul-precision {} "
                                  "--precision {} --out {} --json {}",
                                  cfg.model.init_from, tokens, s.NH, s.B, to_string(matmul), to_string(storage), gpath,
                                  jpath));
  std::ifstream jfile(jpath);
  const json ref = json::parse(jfile);

  // trident: the model from the deck's init_from, the batch from its data pipeline (step 0).
  const GptShapes shapes = GptShapes::from(cfg.model);
  ASSERT_EQ(shapes.Vp, (s.V + s.pad_to - 1) / s.pad_to * s.pad_to);
  Kernels& k = Reference::kernels();
  const MatmulPrecisionScope precision(k, matmul);
  GptModel model(shapes, k, {cfg.train.recompute, storage}, s.B);
  const ParameterLayout& layout = model.layout();
  std::vector<float> host(layout.total());
  load_hf_safetensors(layout, cfg.model.init_from, host.data());
  k.copy_to_device(model.params(), host.data(), layout.total());
  k.fill(model.grads(), 0.f, layout.total());

  auto stream = open_token_stream(DataFormat::LlmC, tokens, s.V);
  BatchSampler sampler(*stream, DataOrder::Sequential, 0, s.T, s.B);
  std::vector<int32_t> inputs(s.B * s.T), targets(s.B * s.T);
  for (int64_t j = 0; j < s.B; ++j) sampler.sample(0, j, inputs.data() + j * s.T, targets.data() + j * s.T);
  const double positions = double(s.B * s.T);
  const double loss = model.forward_backward(inputs.data(), targets.data(), float(1.0 / positions)) / positions;
  k.fence();
  std::vector<float> grads(layout.total());
  k.copy_to_host(grads.data(), model.grads(), layout.total());

  const double ref_loss = ref.at("loss").get<double>();
  const double loss_err = std::abs(loss - ref_loss) / std::abs(ref_loss);
  const bool bf16_attention = attention_follows_bf16(matmul, shapes.HD);
  const double loss_tol = bf16_attention ? kBf16AttentionLossTol : bf16 ? kBf16LossTol : kLossTol;
  const double grad_tol = bf16_attention ? kBf16AttentionGradTol : bf16 ? kBf16GradTol : kGradTol;
  EXPECT_LE(loss_err, loss_tol) << "loss " << loss << " vs reference " << ref_loss;

  SafetensorsReader gref(gpath);
  double worst = 0, worst_key_bias = 0;
  std::string worst_name;
  std::vector<std::string> seen;
  for (const auto& t : layout.tensors()) {
    double norm = 0;
    const double err = tensor_rel_err(gref, t, shapes, grads.data(), &norm);
    EXPECT_GT(norm, 0.0) << t.name << ": the reference gradient is zero, so the check would be empty";
    EXPECT_LE(err, grad_tol)
        << "gradient of " << t.name << ": ||g - g_ref|| / ||g_ref|| = " << err;
    if (err > worst) worst = err, worst_name = t.name;
    seen.push_back(t.name);
    if (is_qkv_bias(t)) {
      const int64_t C = shapes.C;
      const auto r = gref.read_f32(t.name, t.shape);
      const float* g = grads.data() + t.offset;
      const double qv = std::hypot(slice_err(g, r, 0, C).ref_norm, slice_err(g, r, 2 * C, 3 * C).ref_norm);
      const SliceErr key = slice_err(g, r, C, 2 * C);
      // Zero because a row's dS sums to zero; bf16 attention rounds dS, and bf16 storage computes D from
      // the stored (rounded) output, so there it is only small.
      if (!bf16_attention && storage == Precision::FP32) {
        EXPECT_LE(key.ref_norm, 1e-12 * qv) << t.name << ": the reference's key-bias gradient is not zero";
        EXPECT_LE(key.norm, 1e-5 * qv) << t.name << ": the key-bias gradient is not round-off";
      }
      worst_key_bias = std::max(worst_key_bias, key.norm / qv);
    }
  }
  // Every gradient the reference has is checked (no tensor trident lacks).
  std::vector<std::string> ref_names = gref.names();
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, ref_names);
  std::printf("[reference] %-26s recompute %-9s loss %.9f (ref %.9f) rel err %.2e | max grad rel err %.2e (%s) "
              "| fp32 torch: loss %.2e, grads %.2e | key-bias grad %.1e of q,v\n",
              s.name.c_str(), recompute.c_str(), loss, ref_loss, loss_err, worst, worst_name.c_str(),
              ref.at("loss_f32_rel_err").get<double>(), ref.at("max_grad_rel_err_f32").get<double>(), worst_key_bias);
}

// The reference's hand-written LayerNorm, GELU, attention and safetensors I/O against torch's own ops
// and a naive per-head, per-position formulation.
TEST_F(Reference, ReferenceSelfTest) {
  const json r = python("selftest");
  EXPECT_TRUE(r.at("ok").get<bool>()) << r.dump(1);
}

// The GPT-2 vocabulary (small width to stay fast), tied head.
const Spec kGpt2Vocab{"gpt2-vocab-50257", 50257, 32, 2, 64, 4, 256, true, 1, 4, 1};
// A prime vocabulary padded to 512 rows: padding must change nothing.
const Spec kPrimePadded{"prime-509-pad-64", 509, 32, 2, 64, 4, 256, true, 64, 4, 2};
// Untied LM head (padded too), other shapes: 3 heads of 16, MLP width not 4*hidden, 3 layers.
const Spec kUntied{"untied-prime-1021-pad-128", 1021, 16, 3, 48, 3, 160, false, 128, 3, 3};

TEST_F(Reference, LossAndGradientsGpt2VocabRecomputeNone) { check_gradients(kGpt2Vocab, "none"); }
TEST_F(Reference, LossAndGradientsGpt2VocabRecomputeFull) { check_gradients(kGpt2Vocab, "full"); }
TEST_F(Reference, LossAndGradientsGpt2VocabRecomputeSelective) { check_gradients(kGpt2Vocab, "selective"); }
TEST_F(Reference, LossAndGradientsPrimeVocabPadded) { check_gradients(kPrimePadded, "none"); }
TEST_F(Reference, LossAndGradientsUntiedHead) { check_gradients(kUntied, "selective"); }
// Two heads of 64: attention's operands are rounded too (kernels.hpp attention_follows_bf16).
const Spec kHead64{"head64-prime-509-pad-64", 509, 32, 2, 128, 2, 256, true, 64, 4, 4};
TEST_F(Reference, LossAndGradientsBf16MatmulOperands) {
  check_gradients(kPrimePadded, "none", MatmulPrecision::BF16);
  check_gradients(kUntied, "full", MatmulPrecision::BF16);
  check_gradients(kHead64, "selective", MatmulPrecision::BF16);
}
// train.precision = "bf16": the kept activations stored in bf16 as well (gpt2_reference.py --precision bf16),
// the same bounds. Measured: loss 8.7e-6, 4.4e-9, 1.3e-5 and gradients 2.6e-3, 3.1e-4, 4.9e-3 (the
// reference's own float32 run: 2.5e-3, 2.2e-4, 4.9e-3). A reference whose attention backward took D from
// the unrounded output (trident's kernels read the stored, rounded one) was 4.1e-3 - 4.4e-3 away on the
// first two models, over the 4e-3 bound.
TEST_F(Reference, LossAndGradientsBf16Storage) {
  check_gradients(kPrimePadded, "none", MatmulPrecision::BF16, Precision::BF16);
  check_gradients(kUntied, "full", MatmulPrecision::BF16, Precision::BF16);
  check_gradients(kHead64, "selective", MatmulPrecision::BF16, Precision::BF16);
}

// Export: save_hf_safetensors of the loaded weights, read back by the reference's own reader, equals
// the file it was loaded from, bit for bit (same names, shapes, F32 values; no padding rows).
void check_export_round_trip(const Spec& s) {
  SCOPED_TRACE(s.name);
  const Config cfg = parse_deck(Reference::model_deck(s, "none"), "reference.toml");
  const GptShapes shapes = GptShapes::from(cfg.model);
  const ParameterLayout layout(shapes);
  std::vector<float> host(layout.total());
  load_hf_safetensors(layout, cfg.model.init_from, host.data());
  const std::string out = Reference::path("export_" + weights_key(s) + ".safetensors");
  save_hf_safetensors(layout, host.data(), out);
  const json r = Reference::python(fmt::format("compare {} {}", cfg.model.init_from, out));
  EXPECT_TRUE(r.at("equal").get<bool>()) << r.dump(1);
  std::printf("[reference] export round trip %-26s %d tensors equal: %s\n", s.name.c_str(), r.at("tensors").get<int>(),
              r.at("equal").get<bool>() ? "yes" : "NO");
}

TEST_F(Reference, ExportRoundTripTied) { check_export_round_trip(kPrimePadded); }
TEST_F(Reference, ExportRoundTripUntiedPadded) { check_export_round_trip(kUntied); }

// Greedy decoding through the KV cache (generate/decoder.hpp) against the reference's greedy decoding by
// full recomputation in float64: every step's logits within 1e-5 absolute (a float32 forward of logits of
// magnitude < 10 through 2-3 layers: a few float roundings of 10, ~1e-6, measured 1.5e-6) and the same
// tokens (the reference's top-two margins are checked to be far above that). Then the cache's
// logits, one token at a time, against the decoder's own all-at-once pass over the same sequence: the same
// values up to float rounding of differently blocked sums (1e-5).
constexpr double kGreedyLogitTol = 1e-5;
constexpr int64_t kGreedyNew = 20;
const char* const kGreedyPrompt = "3,1,4,1,5";

// New tokens decoded for spec s: kGreedyNew, or as many as its positions hold after the 5-token prompt.
int64_t greedy_steps(const Spec& s) { return std::min<int64_t>(kGreedyNew, s.T - 5); }

json greedy_reference(const std::string& weights, const Spec& s, const std::string& out) {
  return Reference::python(fmt::format("greedy --weights {} --heads {} --prompt {} --new {} --json {}", weights, s.NH,
                                       kGreedyPrompt, greedy_steps(s), out));
}

void check_greedy_decoding(const Spec& s) {
  const std::string ref_file = Reference::path(weights_key(s) + "_greedy.json");
  const json summary = greedy_reference(Reference::weights(s), s, ref_file);
  ASSERT_GT(summary.at("min_margin").get<double>(), 100 * kGreedyLogitTol) << "a near-tie would make argmax fragile";
  std::ifstream f(ref_file);
  const json ref = json::parse(f);
  const Config cfg = parse_deck(Reference::model_deck(s, "full") + "[data]\nformat = \"llmc\"\npath = \"" +
                                    Reference::data(s.V) + "\"\n",
                                "greedy.toml");
  Trainer trainer(cfg, Reference::kernels(), nullptr, Trainer::Use::ModelOnly);
  GptModel& model = trainer.model();
  Decoder decoder(model.shapes(), model.layout(), model.params(), Reference::kernels(), nullptr, 1, s.T);
  std::vector<int32_t> sequence = {3, 1, 4, 1, 5};
  const int64_t prompt = int64_t(sequence.size());
  std::vector<float> logits = decoder.feed(sequence.data(), prompt);
  std::vector<std::vector<float>> stepwise;
  double worst = 0;
  const int64_t steps = greedy_steps(s);
  for (int64_t i = 0; i < steps; ++i) {
    const auto& want = ref.at("steps").at(i).at("logits");
    ASSERT_EQ(int64_t(logits.size()), s.V);
    for (int64_t v = 0; v < s.V; ++v) worst = std::max(worst, std::abs(double(logits[v]) - want.at(v).get<double>()));
    const int32_t token = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    ASSERT_EQ(token, ref.at("tokens").at(i).get<int32_t>()) << "step " << i;
    stepwise.push_back(logits);
    sequence.push_back(token);
    if (i + 1 < steps) logits = decoder.feed(&token, 1);
  }
  EXPECT_LE(worst, kGreedyLogitTol);
  std::printf("[reference] greedy %s: %lld tokens equal, logits within %.2e of float64 full recomputation\n",
              s.name.c_str(), (long long)steps, worst);
  decoder.reset();
  const std::vector<float> all = decoder.feed(sequence.data(), prompt + steps - 1, true);
  double cache_vs_whole = 0;
  for (int64_t i = 0; i < steps; ++i)
    for (int64_t v = 0; v < s.V; ++v)
      cache_vs_whole = std::max(cache_vs_whole, double(std::abs(all[(prompt - 1 + i) * s.V + v] - stepwise[i][v])));
  EXPECT_LE(cache_vs_whole, 1e-5);
}

TEST_F(Reference, GreedyDecodingWithKvCacheMatchesFullRecomputation) { check_greedy_decoding(kPrimePadded); }
TEST_F(Reference, GreedyDecodingWithKvCacheMatchesFullRecomputationUntied) { check_greedy_decoding(kUntied); }

// `trident generate` end to end: greedy on 1 rank and across a TP group of 2 gives the reference's tokens;
// a seeded sample with top-k and top-p is the same on a rerun and at tp 2, and another seed changes it.
TEST_F(Reference, GenerateCommandGreedyAndSeededSamplingOnOneAndTwoRanks) {
  const Spec s = kPrimePadded;
  const json ref = greedy_reference(weights(s), s, path("generate_greedy_ref.json"));
  const std::string deck = path("generate.toml");
  test::write_file(deck, model_deck(s, "none") + fmt::format("[data]\nformat = \"llmc\"\npath = \"{}\"\n", data(s.V)));
  auto generate = [&](int np, const std::string& options, const std::string& name) {
    const std::string out = path(name + ".json");
    std::string log;
    const std::string cmd = fmt::format("{} OPENBLAS_NUM_THREADS=1 timeout -k 5 300 {} -n {} {} generate {} --prompt-ids {} "
                                        "--max-new-tokens {} --json {} {}",
                                        test::without_parent_mpi_env(), test::local_mpiexec(), np,
                                        test::trident_binary(), deck, kGreedyPrompt, kGreedyNew, out, options);
    EXPECT_EQ(test::run_command(cmd, &log), 0) << cmd << "\n" << log;
    std::ifstream f(out);
    return json::parse(f).at("samples");
  };
  for (const int np : {1, 2}) {
    const json greedy = generate(np, "--temperature 0", fmt::format("greedy_np{}", np));
    ASSERT_EQ(greedy.size(), 1u);
    EXPECT_EQ(greedy.at(0).at("tokens"), ref.at("tokens")) << np << " rank(s)";
  }
  const std::string sampling = "--samples 3 --temperature 0.9 --top-k 40 --top-p 0.95 --seed ";
  const json first = generate(1, sampling + "7", "sample_a"), again = generate(1, sampling + "7", "sample_b");
  const json tp2 = generate(2, sampling + "7", "sample_tp2"), other = generate(1, sampling + "8", "sample_c");
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(first, again);
  EXPECT_EQ(first, tp2);
  EXPECT_NE(first, other);
  EXPECT_NE(first.at(0).at("tokens"), first.at(1).at("tokens")) << "each sample draws from its own stream";
}

// `trident eval --hellaswag` against the reference's scores of the same file (byte tokens, so both sides
// tokenize alike without a shared tokenizer): every ending's mean and total loss within 1e-5 relative
// (the float32 forward's error, as for the loss), the same predictions and accuracy, on 1 rank and at tp 2.
// The file has multi-byte UTF-8 and one context longer than the model's positions (shortened from its start).
TEST_F(Reference, HellaswagScoresMatchReferenceOnOneAndTwoRanks) {
  const Spec s{"bytes-300-seq-96", 300, 96, 2, 64, 4, 256, true, 64, 4, 5};
  const std::string file = path("hellaswag.jsonl");
  std::string long_context;
  for (int i = 0; i < 12; ++i) long_context += "and then it went on ";
  test::write_file(
      file,
      R"({"ind": 1, "ctx": "A man is sitting on a roof. He", "label": 3, "endings": ["is using wrap to wrap a pair of skis.", "is ripping level tiles off.", "is holding a rubik's cube.", "starts pulling up roofing on a roof."]})"
      "\n"
      R"({"ctx": "Le café était très chaud, alors elle", "label": 0, "endings": ["attendit.", "le but d'un trait à 90°C.", "sourit", "x"]})"
      "\n\n"
      R"({"ctx": "漢字を書く人が", "label": 1, "endings": ["いる。", "ペンを持った。", "寝る", "🙂 走った"]})"
      "\n"
      R"({"ctx": ")" + long_context + R"(", "label": 2, "endings": ["stopped.", "kept going", "ended.", "went."]})" + "\n");
  const json ref = python(fmt::format("choices --weights {} --heads {} --file {}", weights(s), s.NH, file));
  const std::string deck = path("hellaswag.toml");
  test::write_file(path("text.txt"), "unused: the model is only evaluated\n");
  test::write_file(deck, model_deck(s, "none") + fmt::format("[data]\nformat = \"text\"\npath = \"{}\"\n",
                                                             path("text.txt")));
  for (const int np : {1, 2}) {
    SCOPED_TRACE(fmt::format("{} rank(s)", np));
    const std::string out = path(fmt::format("hellaswag_np{}.json", np));
    std::string log;
    const std::string cmd = fmt::format("{} OPENBLAS_NUM_THREADS=1 timeout -k 5 300 {} -n {} {} eval {} --hellaswag {} "
                                        "--json {}",
                                        test::without_parent_mpi_env(), test::local_mpiexec(), np,
                                        test::trident_binary(), deck, file, out);
    ASSERT_EQ(test::run_command(cmd, &log), 0) << cmd << "\n" << log;
    std::ifstream f(out);
    const json r = json::parse(f);
    const auto& got = r.at("per_example");
    const auto& want = ref.at("examples");
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].at("prediction"), want[i].at("prediction")) << "example " << i;
      EXPECT_EQ(got[i].at("prediction_by_sum"), want[i].at("prediction_by_sum")) << "example " << i;
      for (const char* key : {"mean_losses", "sum_losses"})
        for (size_t e = 0; e < 4; ++e) {
          const double g = got[i].at(key).at(e).get<double>(), w = want[i].at(key).at(e).get<double>();
          worst = std::max(worst, std::abs(g - w) / std::abs(w));
        }
    }
    EXPECT_LE(worst, kLossTol);
    EXPECT_EQ(r.at("correct"), ref.at("correct"));
    EXPECT_EQ(r.at("contexts_shortened").get<int64_t>(), 1);
    EXPECT_GT(got[3].at("context_tokens_dropped").get<int64_t>(), 0);
    std::printf("[reference] hellaswag on %d rank(s): %lld of %zu correct as the reference, losses within %.2e\n", np,
                (long long)r.at("correct").get<int64_t>(), got.size(), worst);
  }
}

// `trident eval` over a whole token file against the reference's float64 loss over every whole window,
// serially and on 2 and 4 ranks (dp 2; tp 2 x pp 2): the same windows are scored whatever the layout,
// and the last batch's padding is not. 6000 tokens in windows of 32: 187 windows, 15 tokens left over;
// global batch 8: 24 batches, the last holding 3 windows and 5 of padding. Tolerance: kLossTol, as for
// one batch (the mean over 187 windows of float32 losses summed in double).
TEST_F(Reference, WholeFileEvaluationMatchesReferenceOnEveryLayout) {
  const Spec s = kPrimePadded;
  const std::string tokens = data(s.V);
  const json ref = python(fmt::format("evaluate --weights {} --data {} --heads {}", weights(s), tokens, s.NH));
  ASSERT_EQ(ref.at("windows").get<int64_t>(), 187);
  ASSERT_NE(ref.at("windows").get<int64_t>() % 8, 0) << "the last batch must hold padding";
  const std::string deck = path("eval.toml");
  test::write_file(deck, model_deck(s, "none") + fmt::format("micro_batch = 2\nglobal_batch = 8\n[data]\nformat = "
                                                             "\"llmc\"\npath = \"{}\"\n",
                                                             tokens));
  const std::vector<std::pair<int, std::string>> layouts = {
      {1, ""}, {2, "--set mesh.dp=2"}, {4, "--set mesh.tp=2 --set mesh.pp=2"}};
  for (const auto& [np, sets] : layouts) {
    SCOPED_TRACE(fmt::format("{} rank(s) {}", np, sets));
    const std::string out = path(fmt::format("eval_np{}.json", np));
    std::string log;
    const std::string cmd = fmt::format("{} OPENBLAS_NUM_THREADS=1 timeout -k 5 300 {} -n {} {} eval {} --data {} "
                                        "--json {} {}",
                                        test::without_parent_mpi_env(), test::local_mpiexec(), np,
                                        test::trident_binary(), deck, tokens, out, sets);
    ASSERT_EQ(test::run_command(cmd, &log), 0) << cmd << "\n" << log;
    std::ifstream f(out);
    const json r = json::parse(f);
    EXPECT_EQ(r.at("windows"), ref.at("windows"));
    EXPECT_EQ(r.at("positions"), ref.at("positions"));
    EXPECT_EQ(r.at("tokens_not_scored"), ref.at("tokens_not_scored"));
    const double loss = r.at("loss").get<double>(), ref_loss = ref.at("loss").get<double>();
    EXPECT_LE(std::abs(loss - ref_loss) / ref_loss, kLossTol) << loss << " vs reference " << ref_loss;
    EXPECT_NEAR(r.at("perplexity").get<double>(), std::exp(ref_loss), 1e-4 * std::exp(ref_loss));
    std::printf("[reference] eval on %d rank(s): loss %.8f (ref %.8f), %lld windows\n", np, loss, ref_loss,
                (long long)r.at("windows").get<int64_t>());
  }
}

// 10 AdamW steps: warm-up then cosine decay, 4 micro-batches per step, clipping on the first steps.
TEST_F(Reference, TenAdamWStepsWithWarmupClippingAndAccumulation) {
  const Spec s = kPrimePadded;
  const int64_t steps = 10, global_batch = 4, micro_batch = 1, warmup = 3;
  const double lr = 3e-3, min_lr = 3e-4, wd = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  // The gradient norm falls from about 3 to about 1.5 over these steps: clipping at 2 acts on the
  // first steps only, so both branches are exercised.
  const double clip = 2.0;
  const std::string tokens = data(s.V);
  const std::string deck =
      model_deck(s, "selective") +
      fmt::format("steps = {}\nmicro_batch = {}\nglobal_batch = {}\nlr = {}\nmin_lr = {}\nwarmup_steps = {}\n"
                  "lr_schedule = \"cosine\"\nweight_decay = {}\nbeta1 = {}\nbeta2 = {}\neps = {}\ngrad_clip = {}\n"
                  "[data]\nformat = \"llmc\"\npath = \"{}\"\n[runtime]\npeak_tflops = 1.0\n",
                  steps, micro_batch, global_batch, lr, min_lr, warmup, wd, beta1, beta2, eps, clip, tokens);
  const Config cfg = parse_deck(deck, "reference-train.toml");
  ASSERT_LT(cfg.train.micro_batch, cfg.train.global_batch);

  const std::string final_weights = path("train_final.safetensors");
  const json ref = python(fmt::format(
      "train --weights {} --data {} --heads {} --steps {} --global-batch {} --micro-batch {} --lr {} --min-lr {} "
      "--warmup {} --schedule cosine --weight-decay {} --beta1 {} --beta2 {} --eps {} --grad-clip {} "
      "--out-weights {}",
      cfg.model.init_from, tokens, s.NH, steps, global_batch, micro_batch, lr, min_lr, warmup, wd, beta1, beta2, eps,
      clip, final_weights));
  const auto& ref_steps = ref.at("steps");
  ASSERT_EQ(int64_t(ref_steps.size()), steps);

  Trainer trainer(cfg, kernels());
  int clipped = 0, unclipped = 0;
  double worst_loss = 0, worst_norm = 0;
  for (int64_t step = 1; step <= steps; ++step) {
    const StepMetrics m = trainer.train_step(step);
    const auto& r = ref_steps[step - 1];
    const double ref_loss = r.at("loss").get<double>(), ref_norm = r.at("grad_norm").get<double>();
    const double loss_err = std::abs(m.loss - ref_loss) / std::abs(ref_loss);
    const double norm_err = std::abs(m.grad_norm - ref_norm) / ref_norm;
    worst_loss = std::max(worst_loss, loss_err);
    worst_norm = std::max(worst_norm, norm_err);
    EXPECT_LE(loss_err, kTrainLossTol) << "step " << step << ": loss " << m.loss << " vs reference " << ref_loss;
    EXPECT_LE(norm_err, kGradTol) << "step " << step << ": grad norm " << m.grad_norm << " vs " << ref_norm;
    EXPECT_NEAR(m.lr, r.at("lr").get<double>(), 1e-12 * lr) << "step " << step;
    // The clipping decision is the same on both sides (no norm sits within the tolerance of the clip).
    EXPECT_EQ(m.grad_norm > clip, r.at("clipped").get<bool>()) << "step " << step;
    (m.grad_norm > clip ? clipped : unclipped)++;
    std::printf("[reference] step %2lld lr %.3e loss %.8f (ref %.8f, rel err %.2e) grad norm %.6f (ref %.6f)%s\n",
                (long long)step, m.lr, m.loss, ref_loss, loss_err, m.grad_norm, ref_norm,
                m.grad_norm > clip ? " clipped" : "");
  }
  EXPECT_GT(clipped, 0) << "grad_clip " << clip << " never acted: lower it";
  EXPECT_GT(unclipped, 0) << "grad_clip " << clip << " acted on every step";
  EXPECT_LT(ref_steps[steps - 1].at("loss").get<double>(), ref_steps[0].at("loss").get<double>() - 0.3)
      << "the run should learn something, or the comparison says little";

  // The weights after 10 steps, norm-wise per tensor. The same tolerance as the gradients holds with
  // margin (measured ~1e-5 at most) except for the key third of each QKV bias (see is_qkv_bias): there
  // only a bound on its drift, 10 steps of at most ~lr each.
  GptModel& model = trainer.model();
  std::vector<float> host(model.layout().total());
  kernels().fence();
  kernels().copy_to_host(host.data(), model.params(), model.layout().total());
  SafetensorsReader wref(final_weights);
  double worst_param = 0, key_drift = 0;
  std::string worst_name;
  for (const auto& t : model.layout().tensors()) {
    double err;
    if (is_qkv_bias(t)) {
      const int64_t C = model.shapes().C;
      const auto r = wref.read_f32(t.name, t.shape);
      const float* p = host.data() + t.offset;
      const SliceErr q = slice_err(p, r, 0, C), v = slice_err(p, r, 2 * C, 3 * C);
      err = std::hypot(q.rel * q.ref_norm, v.rel * v.ref_norm) / std::hypot(q.ref_norm, v.ref_norm);
      for (int64_t i = C; i < 2 * C; ++i) key_drift = std::max(key_drift, std::abs(double(p[i]) - r[i]));
    } else {
      err = tensor_rel_err(wref, t, model.shapes(), host.data());
    }
    EXPECT_LE(err, kGradTol) << "parameter " << t.name << " after " << steps << " steps";
    if (err > worst_param) worst_param = err, worst_name = t.name;
  }
  EXPECT_LE(key_drift, double(steps) * lr);
  std::printf("[reference] 10 AdamW steps: max loss rel err %.2e, max grad-norm rel err %.2e, clipped on %d steps, "
              "final parameters max rel err %.2e (%s), key-bias max |drift| %.1e\n",
              worst_loss, worst_norm, clipped, worst_param, worst_name.c_str(), key_drift);
}

}  // namespace
}  // namespace trident
