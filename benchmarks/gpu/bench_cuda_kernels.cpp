// Per-op times of the CUDA backend at the shapes of the GPU comparison's training step, and a model of
// the step built from them. Why: on an H200 (2026-11-28) trident's CUDA backend trained GPT-2 124M at
// B 16, T 1024, train.precision = "bf16" in 252 ms/step (llm.c 45.6, PyTorch 35.9; tf32 211, fp32 394);
// the GPU machine has no nsys or ncu, so this program is our profiler.
//
// What it measures: every op one training step calls (src/model/gpt.cpp's forward, backward and LM head;
// the Trainer's gradient zeroing, src/train/gradient_finisher.cpp's norm and clipping, src/optim/adamw.cpp's
// update; under bf16 the working copy's widening, model/bf16_working_copy.cpp, and the kept activations'
// rounding and unpacking), each through trident::Kernels on make_cuda_kernels() at the shape the step
// calls it with (--shape), the GEMM operands handed over as the step hands them (under bf16: the weights
// as the working copy's bf16 patterns, the kept activations as values and patterns, the LM head's input
// in fp32). The linear layers' GEMMs (qkv, attention projection, fc, fc projection, LM head) forward
// and backward at each matmul precision (fp32, tf32, bf16: Kernels::set_matmul_precision), attention at
// fp32 and bf16 (tf32 leaves attention in fp32). lm_head_pad: the LM head with the vocabulary padded to
// a multiple of 64, for reference only, where --vocab-pad-to leaves it unpadded; lm_head_unpadded: the
// LM head at the vocabulary as given (50257) where --vocab-pad-to pads it, what the padding saves.
// lt_ref/*: the same GEMMs run by cuBLASLt directly (cublaslt_reference.hpp: trident's types with the
// heuristic's first algorithm and the fastest of its first 8; bf16 output as llm.c and PyTorch run them),
// printed after the step model beside the bf16 step's GEMMs: whether a slow GEMM row is trident's (its
// wrapper, its types) or the GEMM's.
//
// Timing: each iteration records a CUDA event on the backend's stream (cuda::native_stream), enqueues the
// op, records a second event and fences; the iteration's time is the events' (UseManualTime), so host
// launch latency between iterations is outside it but the gaps between the kernels of one op (a loop of
// launches such as grad_norm's) are inside. One untimed call first (cuBLASLt's heuristics, the
// allocator). Counters: median_us (the median iteration: what the step model uses); FLOP/s for GEMMs
// (forward 2 N IC OC, backward 4 N IC OC: dinp and dweight) and attention (the causal half of the
// products: forward 2 B NH T^2 HD, backward 4 B NH T^2 HD, its recomputed logits not counted);
// bytes_per_second for the rest (the minimum traffic: each tensor read or written once).
//
// The step model (printed after the benchmarks, --step-precision=bf16|fp32|tf32, default bf16; tf32 and
// fp32 are fp32 storage with that matmul precision): each op's median times how many times one step
// calls it (kStepCounts below; recompute none, tp = pp = dp = 1, zero 0, the default 256 MiB logits
// chunks, one micro-batch), as a table with its total, and the totals at the other precisions. A total
// well below the measured ms/step of `trident train` at the same shape means the time is spent between
// kernels (the host, synchronisation), not in them.
//
// Flags of its own (taken out before Google Benchmark reads the rest):
//   --shape=124m      GPT-2 124M: 12 layers, C 768, NH 12, HD 64, F 3072, V 50257, B 16, T 1024 (default)
//   --shape=774m      GPT-2 774M: 36 layers, C 1280, NH 20, HD 64, F 5120, V 50257, B 8, T 1024
//   --shape=tiny      2 layers, C 128, NH 2, HD 64, F 512, V 512, B 2, T 64: a smoke run on gpu-sim
//   --step-precision=bf16|fp32|tf32
//   --iterations=N    every benchmark runs N timed iterations (default: Google Benchmark's choice)
//   --vocab-pad-to=N  the model's vocabulary padded as model.vocab_pad_to = N does (default 128, trident's
//                     default: 50304, llm.c's and the PyTorch script's; 1 leaves it unpadded)
// Exit status: 2 for an unknown flag value, 1 without a CUDA device.
//
// On the GPU machine, one command from the checkout root with .device-deps carried (configure, a build of
// this program and `trident` alone, both shapes with 50 iterations an op, and `trident train` in bf16 at
// each shape for the measured step to compare with: about 5 minutes, an estimate):
//   LOG_DIR=$OUT bash benchmarks/gpu/run_cuda_kernels.sh
// which runs, for 124m and then 774m,
//   build-cuda-device/benchmarks/gpu/bench_cuda_kernels --shape=124m --iterations=50
//     --benchmark_out=$OUT/cuda-kernels-124m.json --benchmark_out_format=json    (one line)
// On gpu-sim (CPU execution of these CUDA sources; a few seconds at this shape):
//   build-gpusim/benchmarks/gpu/bench_cuda_kernels --shape=tiny --iterations=2
//
// Status: built for sm_90 and run on gpu-sim (--shape=tiny) only; it has not yet run on a real GPU.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend.hpp"
#include "common/device_buffers.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "cuda/cuda_kernels.hpp"
#include "cublaslt_reference.hpp"
#include "kernels.hpp"
#include "model/fp32_tensors.hpp"
#include "model/parameters.hpp"
#include "model/shapes.hpp"
#include "optim/adamw.hpp"

namespace {

using namespace trident;

Kernels* K = nullptr;
cudaStream_t g_stream = nullptr;
cudaEvent_t g_start = nullptr, g_stop = nullptr;

// The shared backend buffers (common/device_buffers.hpp) on the CUDA backend.
struct Buf : bench::DeviceBuf {
  explicit Buf(int64_t n, float lo = -1.0f, float hi = 1.0f, uint32_t seed = 1) : DeviceBuf(*K, n, lo, hi, seed) {}
};
struct Tokens : bench::DeviceTokens {
  Tokens(int64_t n, int32_t vocab) : DeviceTokens(*K, n, vocab) {}
};

// The bf16 patterns of a buffer's values (a working copy's weights, a kept activation).
class Patterns {
 public:
  Patterns(const Buf& values, int64_t n) : p_(K->alloc_bf16(n)) { K->pack_bf16(values.get(), p_, n); }
  explicit Patterns(int64_t n) : p_(K->alloc_bf16(n)) {}
  ~Patterns() { K->free(p_); }
  Patterns(const Patterns&) = delete;
  Patterns& operator=(const Patterns&) = delete;
  uint16_t* get() const { return p_; }

 private:
  uint16_t* p_;
};

// ---- shapes ----
struct Shape {
  const char* name;
  int64_t L, C, NH, F, V, B, T;
};
constexpr Shape kShapes[] = {
    {"124m", 12, 768, 12, 3072, 50257, 16, 1024},
    {"774m", 36, 1280, 20, 5120, 50257, 8, 1024},
    {"tiny", 2, 128, 2, 512, 512, 2, 64},
};

// What the step works with at a shape: the model's shapes and parameter layout (src/model), the LM
// head's rows per chunk (train.logits_chunk_mib's default).
struct Dims {
  Shape shape;
  GptShapes s;
  ParameterLayout layout;  // the whole model's (tp 1, one chunk)
  int64_t L, C, NH, HD, F, QKV, V, Vpad, B, T, N, R;  // V: the vocabulary the model stores (Vp)
  double head_chunks;  // LM-head chunks per micro-batch: N / R (the last chunk's rows counted as a fraction)
  Dims(const Shape& sh, int64_t vocab_pad_to) : shape(sh), s(shapes_of(sh, vocab_pad_to)), layout(s) {
    L = s.L, C = s.C, NH = s.NH, HD = s.HD, F = s.F, QKV = s.qkv_width(), V = s.Vp, B = sh.B, T = s.T;
    Vpad = (V + 63) / 64 * 64;
    N = B * T;
    R = logits_chunk_rows(TrainConfig{}.logits_chunk_bytes(), V, N);
    head_chunks = double(N) / double(R);
  }
  int64_t P() const { return layout.total(); }

 private:
  static GptShapes shapes_of(const Shape& sh, int64_t vocab_pad_to) {
    ModelConfig m;
    m.vocab_size = sh.V;
    m.vocab_pad_to = vocab_pad_to;
    m.seq_len = sh.T;
    m.layers = sh.L;
    m.hidden = sh.C;
    m.heads = sh.NH;
    m.ffn_hidden = sh.F;
    return GptShapes::from(m);
  }
};

constexpr const char* kPrecisionNames[] = {"fp32", "tf32", "bf16"};
constexpr MatmulPrecision kPrecisions[] = {MatmulPrecision::FP32, MatmulPrecision::TF32, MatmulPrecision::BF16};

// ---- timing ----
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(fmt::format("{}: {}", what, cudaGetErrorString(e)));
}

// op() timed between two CUDA events on the backend's stream, then a fence: its milliseconds.
template <class Op>
double event_ms(Op&& op) {
  check(cudaEventRecord(g_start, g_stream), "cudaEventRecord");
  op();
  check(cudaEventRecord(g_stop, g_stream), "cudaEventRecord");
  K->fence();
  float t = 0;
  check(cudaEventElapsedTime(&t, g_start, g_stop), "cudaEventElapsedTime");
  return t;
}

// The same for each iteration of a benchmark, after one untimed call (cuBLASLt's heuristics and
// workspace, the allocator's first blocks): the iteration time and the median_us counter.
template <class Op>
void timed(benchmark::State& s, Op&& op) {
  op();
  K->fence();
  std::vector<double> ms;
  for (auto _ : s) {
    ms.push_back(event_ms(op));
    s.SetIterationTime(ms.back() * 1e-3);
  }
  if (!ms.empty()) s.counters["median_us"] = 1e3 * median(ms);
}

void flops(benchmark::State& s, double per_iter) {
  s.counters["FLOP/s"] = benchmark::Counter(per_iter, benchmark::Counter::kIsIterationInvariantRate);
}
void bytes(benchmark::State& s, double per_iter) { s.SetBytesProcessed(int64_t(per_iter) * s.iterations()); }

int64_t g_iterations = 0;  // --iterations (0: Google Benchmark's choice)

// Registers one benchmark; an error thrown by the backend skips it with its message.
void add(const std::string& name, std::function<void(benchmark::State&)> body,
         benchmark::TimeUnit unit = benchmark::kMicrosecond) {
  auto* b = benchmark::RegisterBenchmark(name.c_str(), [body](benchmark::State& s) {
    try {
      body(s);
    } catch (const std::exception& e) {
      s.SkipWithError(e.what());
    }
  });
  b->UseManualTime()->Unit(unit);
  if (g_iterations > 0) b->Iterations(g_iterations);
}

// ---- the linear layers' GEMMs: out[rows, OC] = inp[rows, IC] W[OC, IC]^T (+ bias) ----
struct Gemm {
  const char* name;
  int64_t rows, IC, OC;
  bool bias;
  // Under bf16 (src/model/gpt.cpp): the input is a kept activation, given as values and patterns in
  // forward (GptModel::kept); backward gives patterns alone where backward reads no values
  // (kept_for_backward: ln_1, ln_2, the GELU output) and both for the attention output. The LM head's
  // input (ln_f's output) is fp32 alone. The weight is the working copy's patterns.
  bool kept, backward_values;
};

std::vector<Gemm> gemms(const Dims& d) {
  std::vector<Gemm> g = {{"qkv", d.N, d.C, d.QKV, true, true, false},
                         {"attn_proj", d.N, d.C, d.C, true, true, true},
                         {"fc", d.N, d.C, d.F, true, true, false},
                         {"fc_proj", d.N, d.F, d.C, true, true, false},
                         {"lm_head", d.R, d.C, d.V, false, false, false}};
  if (d.Vpad != d.V) g.push_back({"lm_head_pad", d.R, d.C, d.Vpad, false, false, false});
  if (d.V != d.shape.V) g.push_back({"lm_head_unpadded", d.R, d.C, d.shape.V, false, false, false});
  return g;
}

// The GEMM's operands as the step at precision p hands them.
struct GemmOperands {
  Buf x, w;
  std::unique_ptr<Patterns> xp, wp;
  GemmOperands(const Gemm& g, MatmulPrecision p) : x(g.rows * g.IC), w(g.OC * g.IC, -0.05f, 0.05f, 2) {
    if (p != MatmulPrecision::BF16) return;
    if (g.kept) xp = std::make_unique<Patterns>(x, g.rows * g.IC);
    wp = std::make_unique<Patterns>(w, g.OC * g.IC);
  }
  GemmInput input(bool values) const {
    if (!xp) return x.get();
    return values ? GemmInput(x.get(), xp->get()) : GemmInput::patterns(xp->get());
  }
  GemmInput weight() const { return wp ? GemmInput::patterns(wp->get()) : GemmInput(w.get()); }
};

void add_gemms(const Dims& d) {
  for (const Gemm& g : gemms(d))
    for (int pi = 0; pi < 3; ++pi) {
      const MatmulPrecision p = kPrecisions[pi];
      const std::string suffix = std::string(g.name) + "/" + kPrecisionNames[pi];
      add("matmul_fwd/" + suffix, [g, p](benchmark::State& s) {
        GemmOperands o(g, p);
        Buf bias(g.OC), out(g.rows * g.OC, 0, 0);
        K->set_matmul_precision(p);
        const GemmInput in = o.input(true), w = o.weight();
        timed(s, [&] { K->matmul_forward(out.get(), in, w, g.bias ? bias.get() : nullptr, g.rows, g.IC, g.OC); });
        flops(s, 2.0 * g.rows * g.IC * g.OC);
      }, benchmark::kMillisecond);
      // The model's backward writes dinp (beta 0), as matmul_backward_overwrite.
      add("matmul_bwd/" + suffix, [g, p](benchmark::State& s) {
        GemmOperands o(g, p);
        Buf dout(g.rows * g.OC, -0.01f, 0.01f, 3), dx(g.rows * g.IC, 0, 0), dw(g.OC * g.IC, 0, 0), db(g.OC, 0, 0);
        K->set_matmul_precision(p);
        const GemmInput in = o.input(g.backward_values), w = o.weight();
        timed(s, [&] {
          K->matmul_backward_overwrite(dx.get(), dw.get(), g.bias ? db.get() : nullptr, dout.get(), in, w, g.rows, g.IC,
                                       g.OC);
        });
        flops(s, 4.0 * g.rows * g.IC * g.OC);
      }, benchmark::kMillisecond);
    }
}

// ---- the same GEMMs in cuBLASLt called directly (cublaslt_reference.hpp) ----
// Each linear layer's three GEMMs posed as trident's Matmul poses them (kernels/cuda/matmul.cuh):
// forward, dinp (accumulated: beta 1) and dweight (beta 1). fp32_out: trident's types (bf16 A and B, fp32
// C and D) with the heuristic's first algorithm, timed; best_us and best_rank: the fastest of the first
// kLtCandidates it offers (the first at its timed median, each other the median of kLtTrials runs). bf16_out: bf16 C and D, beta 0, its first
// algorithm: what llm.c and PyTorch's autocast run. Neither adds a bias nor converts an operand: the gap
// to matmul_fwd / matmul_bwd at bf16 is what trident's wrapper and types cost. The fc forward also with
// CUBLASLT_EPILOGUE_GELU_AUX_BIAS (fp32_out_gelu, bf16_out_gelu): whether fusing the GELU pays, against
// the GEMM and gelu_fwd (llm.c leaves it off by default).
constexpr int kLtCandidates = 8;
constexpr int kLtTrials = 5;

struct Orientation {
  const char* name;
  bool transa, transb;
  int64_t m, n, k;
  float beta;
};

std::vector<Orientation> orientations(const Gemm& g) {
  return {{"fwd", true, false, g.OC, g.rows, g.IC, 0.0f},
          {"dinp", false, false, g.IC, g.rows, g.OC, 1.0f},
          {"dweight", false, true, g.IC, g.OC, g.rows, 1.0f}};
}

double candidate_ms(bench::LtGemm& gemm, int i) {
  gemm.run(i);  // untimed: the algorithm's first launch
  std::vector<double> ms;
  for (int r = 0; r < kLtTrials; ++r) ms.push_back(event_ms([&] { gemm.run(i); }));
  return median(ms);
}

void add_gemm_references(const Dims& d) {
  for (const Gemm& g : gemms(d))
    for (const Orientation& o : orientations(g)) {
      const std::string prefix = std::string("lt_ref/") + g.name + "/" + o.name;
      add(prefix + "/fp32_out", [o](benchmark::State& s) {
        bench::LtGemm gemm(g_stream, {o.transa, o.transb, o.m, o.n, o.k, false, o.beta}, kLtCandidates);
        timed(s, [&] { gemm.run(0); });
        flops(s, gemm.flops());
        // The first algorithm's time is the timed median itself: best_us never reads above it by mere noise.
        int best = 0;
        double best_ms = 1e-3 * s.counters["median_us"].value;
        for (int i = 1; i < gemm.candidates(); ++i)
          if (const double t = candidate_ms(gemm, i); t < best_ms) best_ms = t, best = i;
        s.counters["best_us"] = 1e3 * best_ms;
        s.counters["best_rank"] = best;
        s.counters["candidates"] = gemm.candidates();
      }, benchmark::kMillisecond);
      for (const bool gelu : {false, true}) {
        if (gelu && !(std::string(g.name) == "fc" && std::string(o.name) == "fwd")) continue;
        for (const bool bf16_out : {false, true}) {
          if (!gelu && !bf16_out) continue;  // fp32_out above
          const std::string name = prefix + (bf16_out ? "/bf16_out" : "/fp32_out") + (gelu ? "_gelu" : "");
          add(name, [o, bf16_out, gelu](benchmark::State& s) {
            bench::LtGemm gemm(g_stream, {o.transa, o.transb, o.m, o.n, o.k, bf16_out, 0.0f, gelu}, 1);
            timed(s, [&] { gemm.run(0); });
            flops(s, gemm.flops());
          }, benchmark::kMillisecond);
        }
      }
    }
}

// ---- attention at fp32 and bf16 (TF32 leaves attention in fp32: kernels.hpp attention_follows_bf16) ----
void add_attention(const Dims& d) {
  // Forward: S = q k^T and P v, 2 B NH T^2 HD FLOPs each in full, half of that causal; backward twice that.
  const double causal = 2.0 * d.B * d.NH * double(d.T) * d.T * d.HD;
  for (int pi : {0, 2}) {
    const MatmulPrecision p = kPrecisions[pi];
    add(std::string("attention_fwd/") + kPrecisionNames[pi], [&d, p, causal](benchmark::State& s) {
      Buf qkv(d.N * d.QKV), out(d.N * d.C, 0, 0), lse(d.B * d.NH * d.T, 0, 0);
      K->set_matmul_precision(p);
      timed(s, [&] { K->attention_forward(out.get(), lse.get(), qkv.get(), d.B, d.T, d.NH, d.NH, d.HD); });
      flops(s, causal);
    }, benchmark::kMillisecond);
    // dqkv written, as the model calls it (under fp32 that is a fill and the accumulating kernels).
    add(std::string("attention_bwd/") + kPrecisionNames[pi], [&d, p, causal](benchmark::State& s) {
      Buf qkv(d.N * d.QKV), out(d.N * d.C, 0, 0), lse(d.B * d.NH * d.T, 0, 0), dout(d.N * d.C), dqkv(d.N * d.QKV, 0, 0);
      K->set_matmul_precision(p);
      K->attention_forward(out.get(), lse.get(), qkv.get(), d.B, d.T, d.NH, d.NH, d.HD);
      timed(s, [&] {
        K->attention_backward_overwrite(dqkv.get(), dout.get(), qkv.get(), out.get(), lse.get(), d.B, d.T, d.NH, d.NH,
                                        d.HD);
      });
      flops(s, 2.0 * causal);
    }, benchmark::kMillisecond);
  }
}

// ---- LayerNorm, GELU, the residual stream ----
void add_norms_and_activations(const Dims& d) {
  const int64_t N = d.N, C = d.C, NF = d.N * d.F;
  add("layernorm_fwd", [N, C](benchmark::State& s) {
    Buf x(N * C), w(C), b(C), out(N * C, 0, 0), mean(N, 0, 0), rstd(N, 0, 0);
    timed(s, [&] { K->layernorm_forward(out.get(), mean.get(), rstd.get(), x.get(), w.get(), b.get(), N, C, 1e-5f); });
    bytes(s, 2.0 * N * C * 4);
  });
  add("residual_layernorm_fwd", [N, C](benchmark::State& s) {
    Buf x(N * C), r(N * C), w(C), b(C), out(N * C, 0, 0), mean(N, 0, 0), rstd(N, 0, 0);
    timed(s, [&] {  // x grows by r each iteration: bounded over any run's iterations
      K->residual_layernorm_forward(x.get(), r.get(), out.get(), mean.get(), rstd.get(), w.get(), b.get(), N, C, 1e-5f);
    });
    bytes(s, 4.0 * N * C * 4);  // read x, r; write x, out
  });
  // bf16 storage: the same with the output rounded and its patterns written in the op's pass.
  add("layernorm_fwd_rounded", [N, C](benchmark::State& s) {
    Buf x(N * C), w(C), b(C), out(N * C, 0, 0), mean(N, 0, 0), rstd(N, 0, 0);
    Patterns kept(N * C);
    timed(s, [&] {
      K->layernorm_forward_rounded(kept.get(), out.get(), mean.get(), rstd.get(), x.get(), w.get(), b.get(), N, C,
                                   1e-5f);
    });
    bytes(s, 2.5 * N * C * 4);  // read x; write out and its patterns
  });
  add("residual_layernorm_fwd_rounded", [N, C](benchmark::State& s) {
    Buf x(N * C), r(N * C), w(C), b(C), out(N * C, 0, 0), mean(N, 0, 0), rstd(N, 0, 0);
    Patterns kept(N * C);
    timed(s, [&] {
      K->residual_layernorm_forward_rounded(kept.get(), x.get(), r.get(), out.get(), mean.get(), rstd.get(), w.get(),
                                            b.get(), N, C, 1e-5f);
    });
    bytes(s, 4.5 * N * C * 4);  // read x, r; write x, out and its patterns
  });
  add("layernorm_bwd", [N, C](benchmark::State& s) {
    Buf x(N * C), w(C), b(C), out(N * C, 0, 0), mean(N, 0, 0), rstd(N, 0, 0), dout(N * C), dx(N * C, 0, 0),
        dw(C, 0, 0), db(C, 0, 0);
    K->layernorm_forward(out.get(), mean.get(), rstd.get(), x.get(), w.get(), b.get(), N, C, 1e-5f);
    timed(s, [&] {
      K->layernorm_backward(dx.get(), dw.get(), db.get(), dout.get(), x.get(), w.get(), mean.get(), rstd.get(), N, C);
    });
    bytes(s, 4.0 * N * C * 4);  // read dout, inp, dinp; write dinp
  });
  add("gelu_fwd", [NF](benchmark::State& s) {
    Buf x(NF), out(NF, 0, 0);
    timed(s, [&] { K->gelu_forward(out.get(), x.get(), NF); });
    bytes(s, 2.0 * NF * 4);
  });
  add("gelu_fwd_rounded", [NF](benchmark::State& s) {
    Buf x(NF), out(NF, 0, 0);
    Patterns kept(NF);
    timed(s, [&] { K->gelu_forward_rounded(kept.get(), out.get(), x.get(), NF); });
    bytes(s, 2.5 * NF * 4);
  });
  add("gelu_bwd", [NF](benchmark::State& s) {  // written, as the model calls it
    Buf x(NF), dout(NF), dx(NF, 0, 0);
    timed(s, [&] { K->gelu_backward_overwrite(dx.get(), x.get(), dout.get(), NF); });
    bytes(s, 3.0 * NF * 4);  // read inp, dout; write dinp
  });
  add("copy/N*C", [N, C](benchmark::State& s) {
    Buf x(N * C), y(N * C, 0, 0);
    timed(s, [&] { K->copy(y.get(), x.get(), N * C); });
    bytes(s, 2.0 * N * C * 4);
  });
}

// fill(x, 0) at the sizes a step zeroes: the gradient of the top of the stack (head_forward's dtop), the
// whole gradient buffer at the start of a step. (The layers' gradient scratch is written, not zeroed.)
void add_fills(const Dims& d) {
  const std::pair<const char*, int64_t> sizes[] = {
      {"fill/N*C", d.N * d.C}, {"fill/params", d.P()}};
  for (const auto& [name, n] : sizes)
    add(name, [n = n](benchmark::State& s) {
      Buf x(n, 0, 0);
      timed(s, [&] { K->fill(x.get(), 0.f, n); });
      bytes(s, 4.0 * n);
    });
}

// ---- bf16 storage: kept activations rounded where produced, unpacked for backward ----
void add_bf16_storage(const Dims& d) {
  const std::pair<const char*, int64_t> sizes[] = {{"N*C", d.N * d.C}, {"N*3C", d.N * d.QKV}, {"N*F", d.N * d.F}};
  for (const auto& [name, n] : sizes) {
    add(std::string("round_to_bf16/") + name, [n = n](benchmark::State& s) {
      Buf x(n);
      Patterns packed(n);
      timed(s, [&] { K->round_to_bf16(x.get(), packed.get(), n); });  // in place: the same work every time
      bytes(s, 10.0 * n);  // read and write x, write the patterns
    });
    add(std::string("unpack_bf16/") + name, [n = n](benchmark::State& s) {
      Buf x(n), out(n, 0, 0);
      Patterns packed(x, n);
      timed(s, [&] { K->unpack_bf16(out.get(), packed.get(), n); });
      bytes(s, 6.0 * n);
    });
  }
}

// ---- the bf16 working copy's widening (Bf16WorkingCopy::widen_range): a layer's patterns into fp32,
// the tensors kept in fp32 copied; the position embedding and ln_f are fp32 tensors, copied ----
void add_widening(const Dims& d) {
  add("widen_layer", [&d](benchmark::State& s) {
    const Fp32Tensors kept(d.layout);
    const int64_t begin = d.layout.layer(0).begin, end = d.layout.layer(0).end, base = kept.packed_offset(begin);
    Buf values(end - begin), out(end - begin, 0, 0), fp32(std::max<int64_t>(kept.size(), 1));
    Patterns patterns(values, end - begin);
    timed(s, [&] {
      kept.split(begin, end, [&](int64_t a, int64_t b, bool in_fp32) {
        if (in_fp32)
          K->copy(out.get() + (a - begin), fp32.get() + (kept.packed_offset(a) - base), b - a);
        else
          K->unpack_bf16(out.get() + (a - begin), patterns.get() + (a - begin), b - a);
      });
    });
    bytes(s, 6.0 * (end - begin));
  });
  const std::pair<const char*, int64_t> copies[] = {{"widen_wpe", d.T * d.C}, {"widen_ln_f", 2 * d.C}};
  for (const auto& [name, n] : copies)
    add(name, [n = n](benchmark::State& s) {
      Buf x(n), y(n, 0, 0);
      timed(s, [&] { K->copy(y.get(), x.get(), n); });
      bytes(s, 8.0 * n);
    });
}

// ---- embeddings and the ids' uploads ----
void add_embeddings(const Dims& d) {
  const int64_t N = d.N, C = d.C, V = d.V, T = d.T;
  add("embedding_fwd", [N, C, V](benchmark::State& s) {
    Tokens tok(N, int32_t(V));
    Buf wte(V * C), out(N * C, 0, 0);
    timed(s, [&] { K->embedding_forward(out.get(), tok.get(), wte.get(), 0, V, N, C); });
    bytes(s, 2.0 * N * C * 4);
  });
  add("embedding_fwd_bf16", [N, C, V](benchmark::State& s) {
    Tokens tok(N, int32_t(V));
    Buf wte(V * C), out(N * C, 0, 0);
    Patterns patterns(wte, V * C);
    timed(s, [&] { K->embedding_forward_bf16(out.get(), tok.get(), patterns.get(), 0, V, N, C); });
    bytes(s, 6.0 * N * C);
  });
  add("embedding_bwd", [N, C, V](benchmark::State& s) {
    Tokens tok(N, int32_t(V));
    Buf dwte(V * C, 0, 0), dout(N * C);
    timed(s, [&] { K->embedding_backward(dwte.get(), dout.get(), tok.get(), 0, V, N, C); });
    bytes(s, 3.0 * N * C * 4);  // read dout, read and write the rows of dwte
  });
  // GptModel::add_positions and position_grads: one call per sequence of T rows.
  add("position_fwd", [T, C](benchmark::State& s) {
    Buf x(T * C), wpe(T * C);
    timed(s, [&] { K->position_forward(x.get(), wpe.get(), 1, T, C, 0); });
    bytes(s, 3.0 * T * C * 4);
  });
  add("position_bwd", [T, C](benchmark::State& s) {
    Buf dwpe(T * C, 0, 0), dout(T * C);
    timed(s, [&] { K->position_backward(dwpe.get(), dout.get(), 1, T, C, 0); });
    bytes(s, 3.0 * T * C * 4);
  });
  add("upload_ids", [N](benchmark::State& s) {  // a micro-batch's tokens or targets from the host
    std::vector<int32_t> host(size_t(N), 1);
    int32_t* ids = K->alloc_int(N);
    timed(s, [&] { K->copy_to_device_int(ids, host.data(), N); });
    K->free(ids);
    bytes(s, 4.0 * N);
  });
}

// ---- the LM head's cross-entropy over a chunk's [R, V] logits, and the loss sum ----
void add_cross_entropy(const Dims& d) {
  const int64_t R = d.R, V = d.V, N = d.N;
  struct Xent {
    Tokens targets;
    Buf logits, rowmax, sumexp, tl, losses;
    Xent(int64_t R, int64_t V)
        : targets(R, int32_t(V)), logits(R * V, -4.0f, 4.0f), rowmax(R, 0, 0), sumexp(R, 0, 0), tl(R, 0, 0),
          losses(R, 0, 0) {}
  };
  add("xent_row_max", [R, V](benchmark::State& s) {
    Xent x(R, V);
    timed(s, [&] { K->xent_row_max(x.rowmax.get(), x.logits.get(), R, V, V); });
    bytes(s, 4.0 * R * V);
  });
  add("xent_sumexp_target", [R, V](benchmark::State& s) {
    Xent x(R, V);
    K->xent_row_max(x.rowmax.get(), x.logits.get(), R, V, V);
    timed(s, [&] {
      K->xent_sumexp_target(x.sumexp.get(), x.tl.get(), x.logits.get(), x.rowmax.get(), x.targets.get(), 0, R, V, V);
    });
    bytes(s, 4.0 * R * V);
  });
  add("xent_loss_grad", [R, V, N](benchmark::State& s) {
    Xent x(R, V);
    K->xent_row_max(x.rowmax.get(), x.logits.get(), R, V, V);
    K->xent_sumexp_target(x.sumexp.get(), x.tl.get(), x.logits.get(), x.rowmax.get(), x.targets.get(), 0, R, V, V);
    timed(s, [&] {  // after the first call the logits hold gradients: the same work, finite values
      K->xent_loss_grad(x.losses.get(), x.logits.get(), x.rowmax.get(), x.sumexp.get(), x.tl.get(), x.targets.get(), 0,
                        1.0f / float(N), R, V, V);
    });
    bytes(s, 8.0 * R * V);
  });
  add("sum_into/N", [N](benchmark::State& s) {
    Buf losses(N);
    double* acc = K->alloc_double(1);
    timed(s, [&] { K->sum_into(acc, losses.get(), N); });
    K->free(acc);
    bytes(s, 4.0 * N);
  });
}

// ---- after backward: the gradient norm, clipping, AdamW over the whole model ----
void add_optimizer(const Dims& d) {
  const int64_t P = d.P();
  // GptModel::add_gradient_square_sums: one sum_squares_into per tensor (replicated ones onto sums[1]).
  add("grad_norm", [&d, P](benchmark::State& s) {
    Buf g(P);
    double* sums = K->alloc_double(2);
    timed(s, [&] {
      K->fill_double(sums, 0.0, 2);
      for (const auto& t : d.layout.tensors())
        K->sum_squares_into(sums + (t.split == TpSplit::None ? 1 : 0), g.get() + t.offset, t.numel);
    });
    K->free(sums);
    bytes(s, 4.0 * P);
  });
  add("sum_squares/params", [P](benchmark::State& s) {  // the same traffic in one call (reference)
    Buf g(P);
    double* acc = K->alloc_double(1);
    timed(s, [&] { K->sum_squares_into(acc, g.get(), P); });
    K->free(acc);
    bytes(s, 4.0 * P);
  });
  // GradientFinisher without TP, PP or ZeRO: the factor from the sums on the device, every gradient scaled.
  add("clip_scale", [P](benchmark::State& s) {
    Buf g(P), coef(1);
    double* sums = K->alloc_double(2);
    K->fill_double(sums, 1.0, 2);  // a norm of sqrt(2), clipped to 1
    timed(s, [&] {
      K->clip_coefficient(coef.get(), sums, 1.0);
      K->scale_by(g.get(), coef.get(), P);
    });
    K->free(sums);
    bytes(s, 8.0 * P);
  });
  // The optimizer itself (optim/adamw.hpp). bf16: fp32 masters, the working copy's patterns written in the
  // same pass and its fp32 tensors copied from their masters (AdamW::update with a WorkingCopyView).
  for (const bool working : {false, true})
    add(working ? "adamw/bf16" : "adamw/fp32", [&d, P, working](benchmark::State& s) {
      TrainConfig cfg;
      const Fp32Tensors kept(d.layout);
      std::unique_ptr<Patterns> patterns;
      std::unique_ptr<Buf> kept_values;
      WorkingCopyView view;
      if (working) {
        patterns = std::make_unique<Patterns>(P);
        kept_values = std::make_unique<Buf>(std::max<int64_t>(kept.size(), 1), 0, 0);
        view = {patterns->get(), kept_values->get(), &kept};
      }
      AdamW adamw(d.layout, *K, cfg, 0, -1, view);
      Buf params(P, -0.05f, 0.05f), grads(P, -1e-3f, 1e-3f, 2);
      float* p = working ? adamw.masters() : params.get();
      if (working) K->copy(p, params.get(), P);
      int64_t step = 0;
      timed(s, [&] { adamw.update(p, grads.get(), 6e-4, ++step); });
      bytes(s, (7.0 * 4 + (working ? 2.0 : 0.0)) * P);  // read p, g, m, v; write p, m, v (and the patterns)
    });
}

// ---- the step model ----
// Which steps call an op: every one, train.precision = "bf16" (bf16 storage and working copy), or fp32
// storage (train.precision = "fp32" with matmul_precision fp32 or tf32).
enum class Storage { Any, Bf16, Fp32 };
// What multiplies the calls: once a step, once per sequence (B), once per LM-head chunk (N / R rows).
enum class Times { Step, Sequence, HeadChunk };
struct Count {
  const char* op;  // benchmark name; {g} stands for the GEMM precision, {a} for attention's (fp32 under tf32)
  int64_t per_layer, once;  // calls = L * per_layer + once, times `times`
  Times times;
  Storage storage;
};

// Calls of one training step of one micro-batch (recompute none; tp = pp = dp = 1, zero 0; tied LM head;
// the Trainer's defaults: logits in 256 MiB chunks, gradient clipping at 1.0), counted from the code:
// src/model/gpt.cpp (GptModel::forward, layer_forward, head_forward, head_rows, backward, layer_backward),
// src/train/trainer.cpp (the gradients zeroed), src/train/gradient_finisher.cpp (norm, clip),
// src/optim/adamw.cpp, src/model/bf16_working_copy.cpp (each acquire widens a segment). Not counted: the
// loss's and the norm's copies to the host (the step's two waits for the GPU) and the loss sum's fill_double.
// clang-format off
constexpr Count kStepCounts[] = {
    // op                       per layer  once  times             steps            where
    {"matmul_fwd/qkv/{g}",          1,  0, Times::Step,      Storage::Any},   // layer_forward
    {"matmul_fwd/attn_proj/{g}",    1,  0, Times::Step,      Storage::Any},
    {"matmul_fwd/fc/{g}",           1,  0, Times::Step,      Storage::Any},
    {"matmul_fwd/fc_proj/{g}",      1,  0, Times::Step,      Storage::Any},
    {"matmul_fwd/lm_head/{g}",      0,  1, Times::HeadChunk, Storage::Any},   // head_rows
    {"matmul_bwd/qkv/{g}",          1,  0, Times::Step,      Storage::Any},   // layer_backward
    {"matmul_bwd/attn_proj/{g}",    1,  0, Times::Step,      Storage::Any},
    {"matmul_bwd/fc/{g}",           1,  0, Times::Step,      Storage::Any},
    {"matmul_bwd/fc_proj/{g}",      1,  0, Times::Step,      Storage::Any},
    {"matmul_bwd/lm_head/{g}",      0,  1, Times::HeadChunk, Storage::Any},   // head_rows
    {"attention_fwd/{a}",           1,  0, Times::Step,      Storage::Any},
    {"attention_bwd/{a}",           1,  0, Times::Step,      Storage::Any},
    {"layernorm_fwd",               0,  1, Times::Step,      Storage::Fp32},  // layer 0's ln_1
    {"residual_layernorm_fwd",      2,  0, Times::Step,      Storage::Fp32},  // ln_2; the next ln_1, or ln_f
    {"layernorm_fwd_rounded",       0,  1, Times::Step,      Storage::Bf16},  // layer 0's ln_1, kept
    {"residual_layernorm_fwd_rounded", 2, -1, Times::Step,   Storage::Bf16},  // ln_2; the next ln_1 (kept)
    {"residual_layernorm_fwd",      0,  1, Times::Step,      Storage::Bf16},  // ln_f (not kept)
    {"layernorm_bwd",               2,  1, Times::Step,      Storage::Any},   // ln_1, ln_2; ln_f
    {"gelu_fwd",                    1,  0, Times::Step,      Storage::Fp32},
    {"gelu_fwd_rounded",            1,  0, Times::Step,      Storage::Bf16},  // the MLP activation, kept
    {"gelu_bwd",                    1,  0, Times::Step,      Storage::Any},
    {"fill/N*C",                    0,  1, Times::Step,      Storage::Any},   // dtop (the others are written)
    {"fill/params",                 0,  1, Times::Step,      Storage::Any},   // Trainer: gradients zeroed
    {"copy/N*C",                    0,  1, Times::Step,      Storage::Any},   // backward: dres_ = dtop
    {"upload_ids",                  0,  2, Times::Step,      Storage::Any},   // tokens, targets
    {"embedding_fwd",               0,  1, Times::Step,      Storage::Fp32},
    {"embedding_fwd_bf16",          0,  1, Times::Step,      Storage::Bf16},  // from the working copy's patterns
    {"position_fwd",                0,  1, Times::Sequence,  Storage::Any},   // add_positions
    {"embedding_bwd",               0,  1, Times::Step,      Storage::Any},
    {"position_bwd",                0,  1, Times::Sequence,  Storage::Any},   // position_grads
    {"xent_row_max",                0,  1, Times::HeadChunk, Storage::Any},
    {"xent_sumexp_target",          0,  1, Times::HeadChunk, Storage::Any},
    {"xent_loss_grad",              0,  1, Times::HeadChunk, Storage::Any},
    {"sum_into/N",                  0,  1, Times::Step,      Storage::Any},   // the loss
    {"round_to_bf16/N*C",           1,  0, Times::Step,      Storage::Bf16},  // keep: attention out
    {"round_to_bf16/N*3C",          1,  0, Times::Step,      Storage::Bf16},  // keep: qkv
    {"round_to_bf16/N*F",           1,  0, Times::Step,      Storage::Bf16},  // keep: fc out
    {"unpack_bf16/N*C",             1,  0, Times::Step,      Storage::Bf16},  // unpack: attention out
    {"unpack_bf16/N*3C",            1,  0, Times::Step,      Storage::Bf16},  // unpack: qkv
    {"unpack_bf16/N*F",             1,  0, Times::Step,      Storage::Bf16},  // unpack: fc out
    {"widen_layer",                 2,  0, Times::Step,      Storage::Bf16},  // forward and backward acquire
    {"widen_wpe",                   0,  1, Times::Step,      Storage::Bf16},
    {"widen_ln_f",                  0,  1, Times::Step,      Storage::Bf16},
    {"grad_norm",                   0,  1, Times::Step,      Storage::Any},   // a sum_squares_into per tensor
    {"clip_scale",                  0,  1, Times::Step,      Storage::Any},   // when the norm exceeds 1.0
    {"adamw/fp32",                  0,  1, Times::Step,      Storage::Fp32},
    {"adamw/bf16",                  0,  1, Times::Step,      Storage::Bf16},  // masters, patterns, fp32 tensors
};
// clang-format on

// Keeps each benchmark's median (median_us; over repetitions, their median) and a GEMM reference's
// best_us in ms while the console prints.
class StepReporter : public benchmark::ConsoleReporter {
 public:
  StepReporter() : ConsoleReporter(OO_Tabular) {}  // no colour: the output usually goes to a log file
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.error_occurred || r.run_type != Run::RT_Iteration) continue;
      for (const char* counter : {"median_us", "best_us"}) {
        const auto it = r.counters.find(counter);
        if (it != r.counters.end()) kept_[r.run_name.function_name][counter].push_back(1e-3 * it->second.value);
      }
    }
  }
  bool any() const { return !kept_.empty(); }  // false after --benchmark_list_tests, or when nothing ran
  // NaN when the benchmark did not run (filtered out, or skipped with an error).
  double median_ms(const std::string& name) const { return kept_ms(name, "median_us"); }
  double best_ms(const std::string& name) const { return kept_ms(name, "best_us"); }

 private:
  double kept_ms(const std::string& name, const char* counter) const {
    const auto it = kept_.find(name);
    if (it == kept_.end()) return std::nan("");
    const auto c = it->second.find(counter);
    return c == it->second.end() ? std::nan("") : median(c->second);
  }
  std::map<std::string, std::map<std::string, std::vector<double>>> kept_;
};

struct StepRow {
  std::string op;
  double calls, ms;
};

std::vector<StepRow> step_rows(const StepReporter& rep, const Dims& d, int precision) {
  const bool bf16 = kPrecisions[precision] == MatmulPrecision::BF16;
  const std::string g = kPrecisionNames[precision], a = bf16 ? "bf16" : "fp32";
  std::vector<StepRow> rows;
  for (const Count& c : kStepCounts) {
    if ((c.storage == Storage::Bf16 && !bf16) || (c.storage == Storage::Fp32 && bf16)) continue;
    std::string op = c.op;
    if (const size_t at = op.find("{g}"); at != std::string::npos) op.replace(at, 3, g);
    if (const size_t at = op.find("{a}"); at != std::string::npos) op.replace(at, 3, a);
    const double times = c.times == Times::Sequence ? double(d.B) : c.times == Times::HeadChunk ? d.head_chunks : 1.0;
    rows.push_back({op, double(d.L * c.per_layer + c.once) * times, rep.median_ms(op)});
  }
  return rows;
}

// The step's sum over the ops that ran, and how many did not.
std::pair<double, int> step_total(const std::vector<StepRow>& rows) {
  double total = 0;
  int missing = 0;
  for (const StepRow& r : rows) {
    if (std::isnan(r.ms))
      ++missing;
    else
      total += r.calls * r.ms;
  }
  return {total, missing};
}

void print_step_model(const StepReporter& rep, const Dims& d, int precision) {
  const std::vector<StepRow> rows = step_rows(rep, d, precision);
  const auto [total, missing] = step_total(rows);
  std::printf("\nStep model: %s, one training step at --step-precision=%s (%ld layers, C %ld, NH %ld, B %ld, T %ld, "
              "V %ld, %ld parameters; LM head in %.2f chunks of %ld rows): each op's median time x its calls per "
              "step\n",
              d.shape.name, kPrecisionNames[precision], long(d.L), long(d.C), long(d.NH), long(d.B), long(d.T),
              long(d.V), long(d.P()), d.head_chunks, long(d.R));
  std::printf("%-28s %10s %12s %12s %7s\n", "op", "calls/step", "ms each", "ms/step", "share");
  for (const StepRow& r : rows) {
    if (std::isnan(r.ms)) {
      std::printf("%-28s %10.2f %12s %12s %7s\n", r.op.c_str(), r.calls, "not run", "-", "-");
      continue;
    }
    const double per_step = r.calls * r.ms;
    std::printf("%-28s %10.2f %12.4f %12.3f %6.1f%%\n", r.op.c_str(), r.calls, r.ms, per_step,
                total > 0 ? 100.0 * per_step / total : 0.0);
  }
  std::printf("%-28s %10s %12s %12.3f %6.1f%%\n", "total", "", "", total, 100.0);
  if (missing > 0) std::printf("(%d ops did not run: the total leaves them out)\n", missing);
  std::printf("Step model totals at every precision:");
  for (int p = 0; p < 3; ++p) {
    const auto [t, m] = step_total(step_rows(rep, d, p));
    std::printf(" %s %.3f ms%s", kPrecisionNames[p], t, m > 0 ? " (incomplete)" : "");
  }
  std::printf("\nCompare with the measured ms/step of `trident train` at this shape: the difference is time "
              "outside these kernels.\n");
}

// The bf16 step's GEMMs beside the same GEMMs in cuBLASLt called directly (add_gemm_references), in
// ms per step: each op's median x its calls per step (the backward's two GEMMs together).
void print_gemm_references(const StepReporter& rep, const Dims& d) {
  const std::vector<StepRow> rows = step_rows(rep, d, 2);
  const auto calls_of = [&](const std::string& op) {
    for (const StepRow& r : rows)
      if (r.op == op) return r.calls;
    return 0.0;
  };
  std::printf("\nGEMMs of the bf16 step against cuBLASLt called directly, ms per step (trident: matmul_fwd / "
              "matmul_bwd at bf16; lt top-1 and lt best: bf16 A and B, fp32 C and D, the heuristic's first and the "
              "fastest of its first %d algorithms; lt bf16-out: bf16 C and D, as llm.c and PyTorch)\n",
              kLtCandidates);
  std::printf("%-22s %9s %10s %10s %10s %12s\n", "gemm", "calls", "trident", "lt top-1", "lt best", "lt bf16-out");
  double totals[4] = {0, 0, 0, 0};
  for (const Gemm& g : gemms(d)) {
    for (const bool forward : {true, false}) {
      const std::string name = std::string(g.name) + (forward ? " fwd" : " bwd");
      const double calls = calls_of(std::string(forward ? "matmul_fwd/" : "matmul_bwd/") + g.name + "/bf16");
      if (calls == 0) continue;  // lm_head_pad, lm_head_unpadded: reference rows of their own
      const std::string ref = std::string("lt_ref/") + g.name + "/";
      const auto both = [&](auto ms) { return forward ? ms(ref + "fwd") : ms(ref + "dinp") + ms(ref + "dweight"); };
      const double ms[4] = {
          rep.median_ms(std::string(forward ? "matmul_fwd/" : "matmul_bwd/") + g.name + "/bf16"),
          both([&](const std::string& r) { return rep.median_ms(r + "/fp32_out"); }),
          both([&](const std::string& r) { return rep.best_ms(r + "/fp32_out"); }),
          both([&](const std::string& r) { return rep.median_ms(r + "/bf16_out"); })};
      std::printf("%-22s %9.2f", name.c_str(), calls);
      for (int i = 0; i < 4; ++i) {
        std::printf(i == 3 ? " %12.3f" : " %10.3f", calls * ms[i]);
        totals[i] += calls * ms[i];  // NaN (not run) makes the total NaN: printed as such
      }
      std::printf("\n");
    }
  }
  std::printf("%-22s %9s %10.3f %10.3f %10.3f %12.3f\n", "total", "", totals[0], totals[1], totals[2], totals[3]);
  const double fc = calls_of("matmul_fwd/fc/bf16");
  const auto per_step = [&](const char* op) { return fc * rep.median_ms(op); };
  std::printf("The MLP's fc GEMM and GELU in forward, ms per step: trident %.3f + %.3f (GEMM + gelu_fwd_rounded); "
              "cuBLASLt with the GELU epilogue: fp32 out %.3f (not rounded), bf16 out %.3f\n",
              per_step("matmul_fwd/fc/bf16"), per_step("gelu_fwd_rounded"), per_step("lt_ref/fc/fwd/fp32_out_gelu"),
              per_step("lt_ref/fc/fwd/bf16_out_gelu"));
}

void register_benchmarks(const Dims& d) {
  add_gemms(d);
  add_gemm_references(d);
  add_attention(d);
  add_norms_and_activations(d);
  add_fills(d);
  add_bf16_storage(d);
  add_widening(d);
  add_embeddings(d);
  add_cross_entropy(d);
  add_optimizer(d);
}

void print_help() {
  std::printf(
      "bench_cuda_kernels: the CUDA backend's ops at a GPT-2 training step's shapes, and a step model.\n"
      "  --shape=124m|774m|tiny          the model and batch (default 124m)\n"
      "  --step-precision=bf16|fp32|tf32 the step the model table adds up (default bf16)\n"
      "  --iterations=N                  N timed iterations per benchmark (default: Google Benchmark's)\n"
      "  --vocab-pad-to=N                the vocabulary padded as model.vocab_pad_to = N (default 128)\n");
  benchmark::PrintDefaultHelp();
}

bool take_flag(const std::string& arg, const char* flag, std::string* value) {
  const std::string prefix = std::string(flag) + "=";
  if (arg.rfind(prefix, 0) != 0) return false;
  *value = arg.substr(prefix.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string shape_name = "124m", step_name = "bf16", iterations = "0",
              vocab_pad = std::to_string(ModelConfig{}.vocab_pad_to);
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (i == 0 || !(take_flag(a, "--shape", &shape_name) || take_flag(a, "--step-precision", &step_name) ||
                    take_flag(a, "--iterations", &iterations) || take_flag(a, "--vocab-pad-to", &vocab_pad)))
      args.push_back(argv[i]);
  }
  const Shape* shape = nullptr;
  for (const Shape& s : kShapes)
    if (shape_name == s.name) shape = &s;
  if (!shape) {
    std::fprintf(stderr, "bench_cuda_kernels: unknown --shape '%s' (124m, 774m or tiny)\n", shape_name.c_str());
    return 2;
  }
  int step_precision = -1;
  for (int p = 0; p < 3; ++p)
    if (step_name == kPrecisionNames[p]) step_precision = p;
  if (step_precision < 0) {
    std::fprintf(stderr, "bench_cuda_kernels: unknown --step-precision '%s' (bf16, fp32 or tf32)\n", step_name.c_str());
    return 2;
  }
  char* end = nullptr;
  g_iterations = std::strtoll(iterations.c_str(), &end, 10);
  if (iterations.empty() || *end != '\0' || g_iterations < 0) {
    std::fprintf(stderr, "bench_cuda_kernels: --iterations takes a whole number >= 0, not '%s'\n", iterations.c_str());
    return 2;
  }
  const int64_t vocab_pad_to = std::strtoll(vocab_pad.c_str(), &end, 10);
  if (vocab_pad.empty() || *end != '\0' || vocab_pad_to < 1) {
    std::fprintf(stderr, "bench_cuda_kernels: --vocab-pad-to takes a whole number >= 1, not '%s'\n", vocab_pad.c_str());
    return 2;
  }
  int nargs = int(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&nargs, args.data(), print_help);
  if (benchmark::ReportUnrecognizedArguments(nargs, args.data())) return 2;

  int devices = 0;
  std::unique_ptr<Kernels> kernels;
  try {
    devices = cuda_device_count();
    if (devices > 0) kernels = make_cuda_kernels();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_kernels: no CUDA device usable: %s\n", e.what());
    return 1;
  }
  if (devices == 0) {
    std::fprintf(stderr, "bench_cuda_kernels: no CUDA device (cudaGetDeviceCount: 0)\n");
    return 1;
  }
  K = kernels.get();
  g_stream = static_cast<cudaStream_t>(cuda::native_stream(*K));
  if (cudaEventCreate(&g_start) != cudaSuccess || cudaEventCreate(&g_stop) != cudaSuccess) {
    std::fprintf(stderr, "bench_cuda_kernels: cudaEventCreate failed\n");
    return 1;
  }
  const Dims dims(*shape, vocab_pad_to);
  register_benchmarks(dims);  // (some refer to dims, which outlives their run)
  benchmark::AddCustomContext("device", K->device_name());
  benchmark::AddCustomContext("shape", fmt::format("{}: L {} C {} NH {} HD {} F {} V {} B {} T {}", shape->name,
                                                   dims.L, dims.C, dims.NH, dims.HD, dims.F, dims.V, dims.B, dims.T));
  benchmark::AddCustomContext("timing", "CUDA events around each op on the backend's stream, a fence an iteration");
  StepReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  if (reporter.any()) {
    print_step_model(reporter, dims, step_precision);
    print_gemm_references(reporter, dims);
  }
  std::fflush(stdout);
  benchmark::Shutdown();
  cudaEventDestroy(g_start);
  cudaEventDestroy(g_stop);
  K = nullptr;
  kernels.reset();
  return 0;
}
