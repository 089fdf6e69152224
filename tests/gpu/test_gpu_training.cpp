// Training on the CUDA backend against the Kokkos (CPU) backend, fp32 (and bf16 GEMM operands, below):
//   * one forward + backward of the whole model: loss within 1e-5 relative, every parameter's
//     gradient within 1e-4 (relative L2 per tensor), tied and untied, at a GPT-2 head size (HD 64), and
//     Llama-shaped (RMSNorm, RoPE, SwiGLU, grouped- and multi-query attention, no biases);
//   * recompute none / selective / full are bit-identical on the GPU too (deterministic kernels);
//   * whole training steps (Trainer: accumulation, clipping, AdamW): per-step losses within 1e-5
//     relative and gradient norms within 1e-4 of the CPU run; two GPU runs are bit-identical;
//   * `trident train` with runtime.backend = "cuda": a checkpoint written on the GPU resumes bitwise
//     on the GPU, and loads on the CPU backend (losses within 1e-5 of the uninterrupted GPU run).
// Why these tolerances: both backends compute in fp32 and sum the same terms in different orders
// (cuBLAS vs OpenBLAS blocking, flash tiles vs whole rows, block partials vs chunk partials), so each
// op's result differs by a few float roundings (~1e-7 relative); through two layers forward and back
// that compounds to ~1e-6 at most (measured on the GPU machine: see the printed figures). A wrong
// term, index or missing accumulation moves a loss or a gradient by 1e-3 or more.
// Skips (visibly) without a CUDA build or without a GPU.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "backend.hpp"
#include "checkpoint/checkpoint.hpp"
#include "common/model_inputs.hpp"
#include "common/test_support.hpp"
#include "deck/deck.hpp"
#include "model/gpt.hpp"
#include "model/parameters.hpp"
#include "train/gpu_peaks.hpp"
#include "train/peak_throughput.hpp"
#include "train/trainer.hpp"

namespace trident::test {
namespace {

namespace fs = std::filesystem;

#define TRIDENT_REQUIRE_GPU()                                                                      \
  do {                                                                                             \
    if (!cuda_device_available())                                                                  \
      GTEST_SKIP() << "no CUDA device (or a build without CUDA): the GPU training tests need one"; \
  } while (0)

ModelConfig small_model(bool tied, int64_t hidden, int64_t heads) {
  ModelConfig m;
  m.vocab_size = 300;  // padded to 384: the cross-entropy must ignore the padding columns
  m.vocab_pad_to = 128;
  m.seq_len = 64;
  m.layers = 2;
  m.hidden = hidden;
  m.heads = heads;
  m.tie_embeddings = tied;
  return m;
}

std::vector<float> random_params(const ParameterLayout& layout, uint64_t seed) {
  return test::random_params(layout, 0.02, seed, 0.1f);
}

struct Pass {
  double loss_sum = 0;
  std::vector<float> grads;
};

// Two micro-batches of forward + backward (the second accumulates onto the first's gradients).
Pass forward_backward(Kernels& k, const GptShapes& s, ActivationPolicy policy, int64_t B,
                      const std::vector<float>& params, const std::vector<int32_t>& inputs,
                      const std::vector<int32_t>& targets) {
  GptModel model(s, k, policy, B);
  k.copy_to_device(model.params(), params.data(), int64_t(params.size()));
  k.fill(model.grads(), 0.f, model.layout().total());
  const float scale = float(1.0 / double(2 * B * s.T));
  Pass p;
  for (int64_t mb = 0; mb < 2; ++mb)
    p.loss_sum += model.forward_backward(inputs.data() + mb * B * s.T, targets.data() + mb * B * s.T, scale);
  p.grads.resize(model.layout().total());
  k.copy_to_host(p.grads.data(), model.grads(), model.layout().total());
  return p;
}

double relative_l2(const float* got, const float* want, int64_t n) {
  double d2 = 0, w2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = double(got[i]) - double(want[i]);
    d2 += d * d;
    w2 += double(want[i]) * double(want[i]);
  }
  return w2 > 0 ? std::sqrt(d2 / w2) : std::sqrt(d2);
}

class GpuTraining : public ::testing::Test {
 protected:
  void SetUp() override {
    TRIDENT_REQUIRE_GPU();
    cpu_ = start_backend(Backend::Cpu);
    gpu_ = start_backend(Backend::Cuda);
  }
  // Six steps of a bf16 deck on the GPU against the CPU, against a second GPU run, and the CPU's fp32
  // run apart (the bounds: Bf16MatmulTrainingStepsMatchCpuBf16 below).
  void expect_bf16_steps_match_cpu(const Config& cfg) {
    Config gpu_cfg = cfg, fp32_cfg = cfg;
    gpu_cfg.runtime.backend = Backend::Cuda;
    fp32_cfg.train.matmul_precision = MatmulPrecision::FP32;
    fp32_cfg.train.precision = Precision::FP32;
    Trainer cpu(cfg, cpu_->kernels()), gpu(gpu_cfg, gpu_->kernels()), gpu_again(gpu_cfg, gpu_->kernels());
    // The CPU fp32 run has a Kokkos backend of its own: the matmul precision is a backend's setting.
    auto cpu_fp32_backend = start_backend(Backend::Cpu);
    Trainer cpu_fp32(fp32_cfg, cpu_fp32_backend->kernels());
    double fp32_apart = 0;
    for (int64_t step = 1; step <= 6; ++step) {
      const StepMetrics c = cpu.train_step(step), g = gpu.train_step(step), g2 = gpu_again.train_step(step);
      const StepMetrics f = cpu_fp32.train_step(step);
      EXPECT_LE(std::abs(g.loss - c.loss) / c.loss, 3e-5) << "step " << step << ": GPU " << g.loss << " CPU " << c.loss;
      EXPECT_LE(std::abs(g.grad_norm - c.grad_norm) / c.grad_norm, 3e-4) << "step " << step;
      EXPECT_EQ(g.loss, g2.loss) << "step " << step;
      EXPECT_EQ(g.grad_norm, g2.grad_norm) << "step " << step;
      fp32_apart = std::max(fp32_apart, std::abs(f.grad_norm - c.grad_norm) / c.grad_norm);
      std::printf("[gpu-vs-cpu bf16] step %lld: loss %.7f vs %.7f, norm %.6f vs %.6f (fp32 norm %.6f)\n",
                  (long long)step, g.loss, c.loss, g.grad_norm, c.grad_norm, f.grad_norm);
    }
    EXPECT_GT(fp32_apart, 3e-4) << "bf16 operands moved the gradient norms by only " << fp32_apart;
  }
  std::unique_ptr<ComputeBackend> cpu_, gpu_;
};

// A Llama-shaped variant of small_model: RMSNorm, RoPE, SwiGLU, kv_heads key/value heads, no biases.
ModelConfig llama(ModelConfig m, int64_t kv_heads) {
  m.architecture = Architecture::Llama;
  m.norm = Norm::RmsNorm;
  m.norm_eps = 1e-4;
  m.positions = Positions::Rope;
  m.rope_theta = 500.0;
  m.mlp = Mlp::SwiGlu;
  m.ffn_hidden = 96;
  m.bias = false;
  m.kv_heads = kv_heads;
  return m;
}

TEST_F(GpuTraining, ForwardBackwardMatchesCpu) {
  struct Case {
    bool tied;
    int64_t hidden, heads;
    int64_t llama_kv_heads = 0;  // > 0: the Llama-shaped model with this many key/value heads
    int64_t logit_rows = 0;      // > 0: the GPU's LM head this many rows at a time (the CPU's all at once)
  };
  for (const Case c : {Case{true, 64, 4}, Case{false, 64, 4}, Case{true, 128, 2}, Case{false, 64, 4, 2},
                       Case{false, 128, 4, 1}, Case{false, 64, 4, 0, 7}}) {
    SCOPED_TRACE(fmt::format("tied {} hidden {} heads {} llama kv heads {} logit rows {}", c.tied, c.hidden, c.heads,
                             c.llama_kv_heads, c.logit_rows));
    const ModelConfig m = small_model(c.tied, c.hidden, c.heads);
    const GptShapes s = GptShapes::from(c.llama_kv_heads > 0 ? llama(m, c.llama_kv_heads) : m);
    const ParameterLayout layout(s);
    const auto params = random_params(layout, 21);
    const int64_t B = 3;
    const auto inputs = random_tokens(2 * B * s.T, s.V, 1), targets = random_tokens(2 * B * s.T, s.V, 2);
    const ActivationPolicy gpu_policy(Recompute::None, Precision::FP32, c.logit_rows * s.Vp * int64_t(sizeof(float)));
    const Pass want = forward_backward(cpu_->kernels(), s, Recompute::None, B, params, inputs, targets);
    const Pass got = forward_backward(gpu_->kernels(), s, gpu_policy, B, params, inputs, targets);
    const double loss_err = std::abs(got.loss_sum - want.loss_sum) / std::abs(want.loss_sum);
    EXPECT_LE(loss_err, 1e-5) << "GPU loss sum " << got.loss_sum << ", CPU " << want.loss_sum;
    double worst = 0;
    std::string worst_name;
    for (const auto& t : layout.tensors()) {
      const double err = relative_l2(got.grads.data() + t.offset, want.grads.data() + t.offset, t.numel);
      EXPECT_LE(err, 1e-4) << "gradient of " << t.name;
      if (err > worst) worst = err, worst_name = t.name;
    }
    std::printf("[gpu-vs-cpu] loss rel err %.2e, worst gradient rel err %.2e (%s)\n", loss_err, worst,
                worst_name.c_str());
  }
}

// fp32, and bf16 storage (train.precision = "bf16"), where no recompute and selective recompute hand
// the kept activations' bf16 patterns to cuBLASLt in backward while full recompute reruns forward and
// converts its fp32 values (GemmInput): the same bits either way.
TEST_F(GpuTraining, RecomputeModesAreBitIdenticalOnTheGpu) {
  const GptShapes s = GptShapes::from(small_model(true, 64, 4));
  const auto params = random_params(ParameterLayout(s), 22);
  const int64_t B = 2;
  const auto inputs = random_tokens(2 * B * s.T, s.V, 3), targets = random_tokens(2 * B * s.T, s.V, 4);
  for (const Precision precision : {Precision::FP32, Precision::BF16}) {
    gpu_->kernels().set_matmul_precision(precision == Precision::BF16 ? MatmulPrecision::BF16 : MatmulPrecision::FP32);
    const Pass none =
        forward_backward(gpu_->kernels(), s, {Recompute::None, precision}, B, params, inputs, targets);
    for (const Recompute mode : {Recompute::Selective, Recompute::Full}) {
      SCOPED_TRACE(fmt::format("{}, {}", to_string(mode), to_string(precision)));
      const Pass r = forward_backward(gpu_->kernels(), s, {mode, precision}, B, params, inputs, targets);
      EXPECT_EQ(r.loss_sum, none.loss_sum);
      EXPECT_EQ(std::memcmp(r.grads.data(), none.grads.data(), none.grads.size() * sizeof(float)), 0);
    }
  }
}

std::string write_text_data(const std::string& dir) {
  std::string text;
  std::mt19937 gen(5);
  for (int i = 0; i < 20000; ++i) text += char(' ' + gen() % 90);
  write_file(dir + "/data.txt", text);
  return dir + "/data.txt";
}

// heads 4: head size 16; heads 1: head size 64, where bf16 also rounds attention's operands (tensor-core
// attention on the GPU, kernels.hpp attention_follows_bf16).
std::string training_deck(const std::string& data, int heads = 4) {
  return fmt::format(
      "[model]\nvocab_size = 256\nseq_len = 64\nlayers = 2\nhidden = 64\nheads = {}\nseed = 3\n"
      "[train]\nsteps = 6\nmicro_batch = 2\nglobal_batch = 4\nlr = 1e-3\nwarmup_steps = 2\ngrad_clip = 1.0\n"
      "weight_decay = 0.1\n[data]\nformat = \"text\"\npath = \"{}\"\norder = \"shuffle\"\n"
      "[runtime]\npeak_tflops = 1.0\n",
      heads, data);
}

TEST_F(GpuTraining, TrainingStepsMatchCpuAndRepeatBitwise) {
  const std::string dir = make_temp_dir("trident-gpu-train");
  Config cfg = parse_deck(training_deck(write_text_data(dir)), "gpu.toml");
  Config gpu_cfg = cfg;
  gpu_cfg.runtime.backend = Backend::Cuda;
  Trainer cpu(cfg, cpu_->kernels()), gpu(gpu_cfg, gpu_->kernels()), gpu_again(gpu_cfg, gpu_->kernels());
  for (int64_t step = 1; step <= 6; ++step) {
    const StepMetrics c = cpu.train_step(step), g = gpu.train_step(step), g2 = gpu_again.train_step(step);
    EXPECT_LE(std::abs(g.loss - c.loss) / c.loss, 1e-5) << "step " << step << ": GPU " << g.loss << " CPU " << c.loss;
    EXPECT_LE(std::abs(g.grad_norm - c.grad_norm) / c.grad_norm, 1e-4) << "step " << step;
    EXPECT_EQ(g.loss, g2.loss) << "step " << step;
    EXPECT_EQ(g.grad_norm, g2.grad_norm) << "step " << step;
    std::printf("[gpu-vs-cpu] step %lld: loss %.7f vs %.7f, norm %.6f vs %.6f\n", (long long)step, g.loss, c.loss,
                g.grad_norm, c.grad_norm);
  }
  const int64_t n = gpu.model().layout().total();
  std::vector<float> a(n), b(n);
  gpu_->kernels().copy_to_host(a.data(), gpu.model().params(), n);
  gpu_->kernels().copy_to_host(b.data(), gpu_again.model().params(), n);
  EXPECT_EQ(a, b) << "two GPU runs of the same deck differ";
  // The device memory account holds at least parameters, gradients and both moments.
  EXPECT_GE(gpu_->kernels().peak_allocated_bytes(), 4 * n * int64_t(sizeof(float)));
  fs::remove_all(dir);
}

// bf16 GEMM operands (train.matmul_precision = "bf16"): the CUDA backend's bf16 copies and cuBLASLt
// bf16 GEMMs against the CPU backend's rounded copies and sgemm. The two sum in different orders (~1e-7
// relative), and rounding to bf16 turns that into occasional one-unit (2^-8) changes whose RMS is
// ~sqrt(1e-7 2^-8) per GEMM (test_matmul_precision_parallel.cpp); measured on gpu-sim over the 6 steps:
// losses within 6.5e-6 relative, gradient norms within 7.4e-5. Bounds: 3e-5 and 3e-4. bf16 against fp32
// moves the gradient norms by 8.4e-4 at the worst step (checked to exceed 3e-4, so the bound tells
// whether the GPU rounded at all). Two GPU runs stay bit-identical.
TEST_F(GpuTraining, Bf16MatmulTrainingStepsMatchCpuBf16) {
  const std::string dir = make_temp_dir("trident-gpu-bf16");
  // One head of 64: the GEMMs and attention both on bf16 operands (on the GPU: cuBLASLt and the
  // tensor-core attention kernels; T = 64 is one tile of either backend's attention).
  Config cfg = parse_deck(training_deck(write_text_data(dir), 1), "gpu.toml");
  cfg.train.matmul_precision = MatmulPrecision::BF16;
  expect_bf16_steps_match_cpu(cfg);
  fs::remove_all(dir);
}

// train.precision = "bf16": the activations kept for backward stored in bf16 as well, packed and
// unpacked by each backend's own kernels; the same bounds.
TEST_F(GpuTraining, Bf16TrainingStepsMatchCpuBf16) {
  const std::string dir = make_temp_dir("trident-gpu-bf16-storage");
  Config cfg = parse_deck(training_deck(write_text_data(dir), 1), "gpu.toml");
  cfg.train.precision = Precision::BF16;
  expect_bf16_steps_match_cpu(cfg);
  fs::remove_all(dir);
}

// ---- `trident train` on the GPU with checkpoints ----

struct TrainRun {
  int rc = -1;
  std::string out;
  std::map<int64_t, double> loss;
};

TrainRun train(const std::string& deck, const std::string& ckpt_dir, const std::string& sets) {
  static int counter = 0;
  TrainRun r;
  const std::string metrics = fmt::format("{}.metrics-{}.jsonl", deck, ++counter);
  const std::string cmd =
      fmt::format("{} timeout -k 5 300 {} train {} --set runtime.metrics={} --set checkpoint.dir={} "
                  "--set checkpoint.every_steps=3 --set checkpoint.keep=0 {}",
                  without_parent_mpi_env(), trident_binary(), deck, metrics, ckpt_dir, sets);
  r.rc = run_command(cmd, &r.out);
  r.out = "$ " + cmd + "\n" + r.out;
  std::ifstream f(metrics);
  for (std::string line; std::getline(f, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("event")) continue;  // the resume marker
    r.loss[j.at("step").get<int64_t>()] = j.at("loss").get<double>();
  }
  return r;
}

// MFU's reference on the CUDA backend: the device's name from the runtime, the data sheet's figure when
// train/gpu_peaks.hpp names it, else the clock-derived one, said to be so. gpu-sim's device ("gpu-sim
// NVIDIA H100 80GB HBM3", gpusim/src/devices.cpp) is not in the table: 132 SMs x 1.98 GHz x 4096 bf16
// FLOP/clock/SM (sm_90) = 1070.5 TFLOP/s.
TEST_F(GpuTraining, MfuReferenceIsTheDataSheetPeakOrSaysClockDerived) {
  Kernels& k = gpu_->kernels();
  const std::string name = k.device_name();
  ASSERT_FALSE(name.empty());
  Config cfg;
  cfg.runtime.backend = Backend::Cuda;
  const PeakThroughput p = resolve_peak_throughput(cfg, k, nullptr);
  std::printf("device \"%s\": MFU reference %.1f TFLOP/s (%s)\n", name.c_str(), p.tflops, p.source.c_str());
  if (const auto entry = find_gpu_peak(name)) {
    EXPECT_EQ(p.tflops, entry->bf16_dense_tflops);
    EXPECT_EQ(p.source.rfind(entry->product + " dense bf16 peak from NVIDIA's data sheet", 0), 0u) << p.source;
  } else {
    EXPECT_EQ(p.source.rfind("clock-derived, device not in the table: \"" + name + "\"", 0), 0u) << p.source;
    EXPECT_GT(p.tflops, 0);
  }
  if (name.rfind("gpu-sim ", 0) == 0) {
    EXPECT_FALSE(find_gpu_peak(name));
    EXPECT_NEAR(p.tflops, 132 * 1.98e9 * 4096 / 1e12, 1e-6);
  }
  cfg.runtime.peak_tflops = 2;  // the deck's figure wins
  EXPECT_EQ(resolve_peak_throughput(cfg, k, nullptr).source, "runtime.peak_tflops");
}

// A GPU run of `sets` stopped after step 3 resumes bit for bit on the GPU, and within cpu_tolerance
// (relative loss) on the CPU.
void expect_gpu_checkpoint_resumes(const std::string& sets, double cpu_tolerance) {
  const std::string dir = make_temp_dir("trident-gpu-ckpt");
  const std::string deck = dir + "/deck.toml";
  write_file(deck, training_deck(write_text_data(dir)));
  const std::string cuda = "--set runtime.backend=cuda " + sets;
  const TrainRun whole = train(deck, dir + "/whole", cuda);
  ASSERT_EQ(whole.rc, 0) << whole.out;
  ASSERT_EQ(whole.loss.size(), 6u) << whole.out;
  EXPECT_NE(whole.out.find(": cuda on GPU 0"), std::string::npos) << "not on the GPU:\n" << whole.out;

  // A directory as a GPU run stopped after step 3 leaves it.
  auto interrupted = [&](const std::string& name) {
    const std::string d = dir + "/" + name;
    fs::create_directories(d);
    const std::string file = checkpoint_file_name(3);
    fs::copy_file(dir + "/whole/" + file, d + "/" + file);
    write_file(d + "/latest", file + "\n");
    return d;
  };
  const TrainRun gpu = train(deck, interrupted("gpu"), cuda);
  ASSERT_EQ(gpu.rc, 0) << gpu.out;
  EXPECT_NE(gpu.out.find("resumed from"), std::string::npos) << gpu.out;
  for (int64_t s = 4; s <= 6; ++s) EXPECT_EQ(gpu.loss.at(s), whole.loss.at(s)) << "step " << s << "\n" << gpu.out;
  EXPECT_EQ(gpu.loss.count(3), 0u) << "the resumed run repeated step 3";

  const TrainRun cpu = train(deck, interrupted("cpu"), sets);
  ASSERT_EQ(cpu.rc, 0) << cpu.out;
  EXPECT_NE(cpu.out.find("resumed from"), std::string::npos) << cpu.out;
  for (int64_t s = 4; s <= 6; ++s)
    EXPECT_LE(std::abs(cpu.loss.at(s) - whole.loss.at(s)) / whole.loss.at(s), cpu_tolerance)
        << "step " << s << "\n" << cpu.out;
  fs::remove_all(dir);
}

TEST(GpuCheckpoints, GpuCheckpointResumesBitwiseOnGpuAndLoadsOnCpu) {
  TRIDENT_REQUIRE_GPU();
  expect_gpu_checkpoint_resumes("", 1e-5);
}

// train.precision = "bf16": the checkpoint holds the fp32 parameters and moments; the bf16-stored
// activations are recomputed from them, so the resumed GPU run is bit-identical too. On the CPU the
// bf16 GEMMs sum in another order (the bound of Bf16TrainingStepsMatchCpuBf16).
TEST(GpuCheckpoints, Bf16RunResumesBitwiseOnGpu) {
  TRIDENT_REQUIRE_GPU();
  expect_gpu_checkpoint_resumes("--set train.precision=bf16", 3e-5);
}

// runtime.op_profile on the CUDA backend, how the GPU machine (no profiler) profiles a step: the profiled
// run's losses equal the plain run's bit for bit (the wrapper only waits after each operation), and the
// table has each layer operation once per layer and micro-batch (the deck: 2 layers, global batch 4 of
// micro-batches of 2) in each of the 5 steps after the first (left out: it warms up).
TEST(GpuOpProfile, ProfilesTheCudaStepWithoutChangingIt) {
  TRIDENT_REQUIRE_GPU();
  const std::string dir = make_temp_dir("trident-gpu-op-profile");
  const std::string deck = dir + "/deck.toml";
  write_file(deck, training_deck(write_text_data(dir), 1));  // head size 64: the tensor-core attention
  const std::string cuda = "--set runtime.backend=cuda --set train.precision=bf16";
  const TrainRun plain = train(deck, dir + "/plain", cuda);
  const TrainRun profiled = train(deck, dir + "/profiled", cuda + " --set runtime.op_profile=" + dir + "/ops.json");
  ASSERT_EQ(plain.rc, 0) << plain.out;
  ASSERT_EQ(profiled.rc, 0) << profiled.out;
  ASSERT_EQ(plain.loss.size(), 6u) << plain.out;
  EXPECT_EQ(profiled.loss, plain.loss) << profiled.out;
  EXPECT_NE(profiled.out.find("op profile of rank 0 over 5 step(s)"), std::string::npos) << profiled.out;
  std::ifstream f(dir + "/ops.json");
  ASSERT_TRUE(f.good()) << profiled.out;
  const auto rank0 = nlohmann::json::parse(f).at("ranks").at(0);
  EXPECT_EQ(rank0.at("steps").get<int>(), 5);
  std::map<std::string, double> calls;
  for (const auto& op : rank0.at("ops")) {
    calls[op.at("op").get<std::string>()] = op.at("calls_per_step").get<double>();
    EXPECT_GT(op.at("total_ms").get<double>(), 0.0) << op.dump();
  }
  EXPECT_EQ(calls["attention_forward B2 T64 NH1 KVH1 HD64"], 4.0) << rank0.dump(1);
  EXPECT_EQ(calls["attention_backward_overwrite B2 T64 NH1 KVH1 HD64"], 4.0) << rank0.dump(1);
  EXPECT_EQ(calls["matmul_forward 128x64x192"], 4.0) << "the qkv GEMM, N 128 = 2 x 64 rows\n" << rank0.dump(1);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace trident::test
