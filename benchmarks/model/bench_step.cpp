// Whole-training-step benchmark of a GPT-2 124M-shaped model (12 layers, hidden 768, 12 heads,
// vocab 50257, seq 64, micro-batch 4 = global batch 4: one micro-batch per step) on the Kokkos
// backend, against what plain cblas_sgemm gives for exactly the step's GEMMs.
//
//   BM_train_step            Trainer::train_step: zero grads, forward_backward, gradient norm,
//                            clipping, AdamW (what `trident train` times per step)
//   BM_forward_backward      the forward_backward part alone
//   BM_optimizer             gradient norm + clip + AdamW alone
//   BM_init_parameters       start-up: init_parameters() of the whole model on the host, once
//   BM_step_gemms_sgemm      every GEMM of the step as plain cblas_sgemm calls, same shapes and
//                            transposes: per layer qkv C->3C, attention projection C->C, fc C->F,
//                            fc projection F->C (forward y = x W^T; backward dx = dy W, dW += dy^T x),
//                            the LM head C->V, and the attention products per (batch, head):
//                            S = Q K^T and Y = P V forward; dP = dY V^T, dV = P^T dY, dQ = dS K,
//                            dK = dS^T Q backward (full T x T products, as the flops convention counts)
//
// The BLAS thread count is the environment's (OPENBLAS_NUM_THREADS, set before launch); the Kokkos
// backend is Serial. Times are wall clock (UseManualTime): each iteration is one step, and the
// counters give the median step of the run (median_ms), the median process CPU time of a step over
// all threads (cpu_median_ms: at one thread, what the step costs without the waits a loaded machine
// adds; at two, it also counts OpenBLAS workers' spinning), the model GFLOP/s of median_ms (the
// model/flops.hpp convention: every GEMM of the step), and for the sgemm benchmark its GFLOP/s on
// the GEMM FLOPs it executes (the same count).
//
// Extra modes, handled before Google Benchmark sees the arguments:
//   --profile=STEPS          per-Kernels-operation wall time over STEPS steps (after one warm-up
//                            step), through a timing wrapper of the Kernels interface; prints a table
//   --activation_report=MODE runs 2 steps with train.recompute = MODE (none|selective|full) and prints
//                            GptModel::activation_bytes(), the peak RSS of this process (VmHWM; one
//                            mode per process, so that it is that mode's) and the RSS after the steps
//                            (VmRSS: the steady state, without the start-up peak)
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/blas_runtime.hpp"
#include "core/mpi_start.hpp"
#include "deck/deck.hpp"
#include "kernels.hpp"
#include "model/gpt.hpp"
#include "model/parameters.hpp"
#include "model/flops.hpp"
#include "train/metrics.hpp"
#include "train/trainer.hpp"
#include "train/stop_signals.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// The benchmark deck: GPT-2 124M shape at seq 64, batch 4, byte tokens of the GPL-3 text (valid ids
// < 50257). steps is large so the cosine schedule never reaches its end while benchmarking; the
// peak is given so that the Trainer does not spend 0.1 s measuring one.
std::string deck_text(const char* recompute) {
  return std::string(R"([model]
vocab_size = 50257
seq_len = 64
layers = 12
hidden = 768
heads = 12
seed = 1234
[mesh]
tp = 1
[train]
steps = 1000000
micro_batch = 4
global_batch = 4
lr = 6e-4
min_lr = 6e-5
warmup_steps = 10
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0
recompute = ")") + recompute + R"("
[data]
format = "text"
path = "/usr/share/common-licenses/GPL-3"
order = "sequential"
[runtime]
peak_tflops = 1.0
)";
}

trident::Config bench_config(const char* recompute = "none") {
  return trident::parse_deck(deck_text(recompute), "bench_step");
}

// ---- a timing wrapper of the Kernels interface (each call is fenced, so queued backends time right too) ----
class TimedKernels : public trident::Kernels {
 public:
  explicit TimedKernels(trident::Kernels& k) : k_(k) {}
  std::string name() const override { return k_.name() + " (timed)"; }
  struct Entry {
    double seconds = 0;
    int64_t calls = 0;
  };
  std::map<std::string, Entry>& table() { return table_; }
  void reset() { table_.clear(); }

  float* alloc(int64_t n) override { return k_.alloc(n); }
  int32_t* alloc_int(int64_t n) override { return k_.alloc_int(n); }
  double* alloc_double(int64_t n) override { return k_.alloc_double(n); }
  uint16_t* alloc_bf16(int64_t n) override { return k_.alloc_bf16(n); }
  void round_to_bf16(float* x, uint16_t* p, int64_t n) override { T("bf16 storage", [&] { k_.round_to_bf16(x, p, n); }); }
  void pack_bf16(const float* x, uint16_t* p, int64_t n) override { T("bf16 storage", [&] { k_.pack_bf16(x, p, n); }); }
  void unpack_bf16(float* o, const uint16_t* p, int64_t n) override {
    T("bf16 storage", [&] { k_.unpack_bf16(o, p, n); });
  }
  void copy_to_host_double(double* d, const double* s, int64_t n) override {
    T("copy", [&] { k_.copy_to_host_double(d, s, n); });
  }
  void fill_double(double* x, double v, int64_t n) override { T("fill", [&] { k_.fill_double(x, v, n); }); }
  double peak_tflops() override { return k_.peak_tflops(); }
  int64_t allocated_bytes() const override { return k_.allocated_bytes(); }
  int64_t peak_allocated_bytes() const override { return k_.peak_allocated_bytes(); }
  void free(void* p) override { k_.free(p); }
  void copy_to_device(float* d, const float* s, int64_t n) override { T("copy", [&] { k_.copy_to_device(d, s, n); }); }
  void copy_to_host(float* d, const float* s, int64_t n) override { T("copy", [&] { k_.copy_to_host(d, s, n); }); }
  void copy_to_device_int(int32_t* d, const int32_t* s, int64_t n) override {
    T("copy", [&] { k_.copy_to_device_int(d, s, n); });
  }
  void copy(float* d, const float* s, int64_t n) override { T("copy", [&] { k_.copy(d, s, n); }); }
  void fill(float* x, float v, int64_t n) override { T("fill", [&] { k_.fill(x, v, n); }); }
  void fence() override { k_.fence(); }
  void add(float* o, const float* a, const float* b, int64_t n) override { T("add", [&] { k_.add(o, a, b, n); }); }
  void accumulate(float* y, const float* x, int64_t n) override { T("accumulate", [&] { k_.accumulate(y, x, n); }); }
  void scale(float* x, float s, int64_t n) override { T("scale (clip)", [&] { k_.scale(x, s, n); }); }
  void clip_coefficient(float* coef, const double* sums, double max_norm) override {
    T("clip coefficient", [&] { k_.clip_coefficient(coef, sums, max_norm); });
  }
  void scale_by(float* x, const float* coef, int64_t n) override {
    T("scale (clip)", [&] { k_.scale_by(x, coef, n); });
  }
  void sum_squares_into(double* acc, const float* x, int64_t n) override {
    T("sum_squares (grad norm)", [&] { k_.sum_squares_into(acc, x, n); });
  }
  void sum_into(double* acc, const float* x, int64_t n) override { T("sum (loss)", [&] { k_.sum_into(acc, x, n); }); }
  void embedding_forward(float* o, const int32_t* t, const float* w, int64_t vb, int64_t vc, int64_t N,
                         int64_t C) override {
    T("embedding_forward", [&] { k_.embedding_forward(o, t, w, vb, vc, N, C); });
  }
  void embedding_forward_bf16(float* o, const int32_t* t, const uint16_t* w, int64_t vb, int64_t vc, int64_t N,
                              int64_t C) override {
    T("embedding_forward", [&] { k_.embedding_forward_bf16(o, t, w, vb, vc, N, C); });
  }
  void embedding_backward(float* dw, const float* d, const int32_t* t, int64_t vb, int64_t vc, int64_t N,
                          int64_t C) override {
    T("embedding_backward", [&] { k_.embedding_backward(dw, d, t, vb, vc, N, C); });
  }
  void position_forward(float* o, const float* w, int64_t B, int64_t Tn, int64_t C, int64_t t0) override {
    T("position_forward", [&] { k_.position_forward(o, w, B, Tn, C, t0); });
  }
  void position_backward(float* dw, const float* d, int64_t B, int64_t Tn, int64_t C, int64_t t0) override {
    T("position_backward", [&] { k_.position_backward(dw, d, B, Tn, C, t0); });
  }
  void layernorm_forward(float* o, float* m, float* r, const float* i, const float* w, const float* b, int64_t N,
                         int64_t C, float eps) override {
    T("layernorm_forward", [&] { k_.layernorm_forward(o, m, r, i, w, b, N, C, eps); });
  }
  void layernorm_backward(float* di, float* dw, float* db, const float* d, const float* i, const float* w,
                          const float* m, const float* r, int64_t N, int64_t C) override {
    T("layernorm_backward", [&] { k_.layernorm_backward(di, dw, db, d, i, w, m, r, N, C); });
  }
  void rmsnorm_forward(float* o, float* r, const float* i, const float* w, int64_t N, int64_t C, float eps) override {
    T("rmsnorm_forward", [&] { k_.rmsnorm_forward(o, r, i, w, N, C, eps); });
  }
  void rmsnorm_backward(float* di, float* dw, const float* d, const float* i, const float* w, const float* r,
                        int64_t N, int64_t C) override {
    T("rmsnorm_backward", [&] { k_.rmsnorm_backward(di, dw, d, i, w, r, N, C); });
  }
  void residual_layernorm_forward(float* x, const float* res, float* o, float* m, float* r, const float* w,
                                  const float* b, int64_t N, int64_t C, float eps) override {
    T("residual_layernorm_forward", [&] { k_.residual_layernorm_forward(x, res, o, m, r, w, b, N, C, eps); });
  }
  void residual_rmsnorm_forward(float* x, const float* res, float* o, float* r, const float* w, int64_t N, int64_t C,
                                float eps) override {
    T("residual_rmsnorm_forward", [&] { k_.residual_rmsnorm_forward(x, res, o, r, w, N, C, eps); });
  }
  void set_matmul_precision(trident::MatmulPrecision p) override { k_.set_matmul_precision(p); }
  void matmul_forward(float* o, trident::GemmInput i, trident::GemmInput w, const float* b, int64_t N, int64_t IC,
                      int64_t OC) override {
    T(OC > 8 * IC ? "matmul_forward (lm_head)" : "matmul_forward (layers)",
      [&] { k_.matmul_forward(o, i, w, b, N, IC, OC); });
  }
  void matmul_backward(float* di, float* dw, float* db, const float* d, trident::GemmInput i, trident::GemmInput w,
                       int64_t N, int64_t IC, int64_t OC) override {
    T(OC > 8 * IC ? "matmul_backward (lm_head)" : "matmul_backward (layers)",
      [&] { k_.matmul_backward(di, dw, db, d, i, w, N, IC, OC); });
  }
  void attention_forward(float* o, float* lse, const float* q, int64_t B, int64_t Tn, int64_t NH, int64_t KVH,
                         int64_t HD) override {
    T("attention_forward", [&] { k_.attention_forward(o, lse, q, B, Tn, NH, KVH, HD); });
  }
  void attention_forward_rows(float* o, const float* q, int64_t B, int64_t Tn, int64_t NH, int64_t KVH, int64_t HD,
                              int64_t q0, int64_t nq) override {
    T("attention_forward_rows", [&] { k_.attention_forward_rows(o, q, B, Tn, NH, KVH, HD, q0, nq); });
  }
  void attention_backward(float* dq, const float* d, const float* q, const float* o, const float* lse, int64_t B,
                          int64_t Tn, int64_t NH, int64_t KVH, int64_t HD) override {
    T("attention_backward", [&] { k_.attention_backward(dq, d, q, o, lse, B, Tn, NH, KVH, HD); });
  }
  void rope_forward(float* q, const float* tab, int64_t B, int64_t Tn, int64_t NH, int64_t KVH, int64_t HD,
                    int64_t t0, int64_t nt) override {
    T("rope_forward", [&] { k_.rope_forward(q, tab, B, Tn, NH, KVH, HD, t0, nt); });
  }
  void rope_backward(float* dq, const float* tab, int64_t B, int64_t Tn, int64_t NH, int64_t KVH, int64_t HD,
                     int64_t t0, int64_t nt) override {
    T("rope_backward", [&] { k_.rope_backward(dq, tab, B, Tn, NH, KVH, HD, t0, nt); });
  }
  void swiglu_forward(float* o, const float* i, int64_t N, int64_t F) override {
    T("swiglu_forward", [&] { k_.swiglu_forward(o, i, N, F); });
  }
  void swiglu_backward(float* di, const float* i, const float* d, int64_t N, int64_t F) override {
    T("swiglu_backward", [&] { k_.swiglu_backward(di, i, d, N, F); });
  }
  void gelu_forward(float* o, const float* i, int64_t n) override { T("gelu_forward", [&] { k_.gelu_forward(o, i, n); }); }
  void gelu_backward(float* di, const float* i, const float* d, int64_t n) override {
    T("gelu_backward", [&] { k_.gelu_backward(di, i, d, n); });
  }
  void xent_row_max(float* rm, const float* l, int64_t N, int64_t s, int64_t vc) override {
    T("xent_row_max", [&] { k_.xent_row_max(rm, l, N, s, vc); });
  }
  void xent_sumexp_target(float* se, float* tl, const float* l, const float* rm, const int32_t* t, int64_t vb,
                          int64_t N, int64_t s, int64_t vc) override {
    T("xent_sumexp_target", [&] { k_.xent_sumexp_target(se, tl, l, rm, t, vb, N, s, vc); });
  }
  void xent_loss_grad(float* lo, float* l, const float* rm, const float* se, const float* tl, const int32_t* t,
                      int64_t vb, float sc, int64_t N, int64_t s, int64_t vc) override {
    T("xent_loss_grad", [&] { k_.xent_loss_grad(lo, l, rm, se, tl, t, vb, sc, N, s, vc); });
  }
  void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const std::vector<trident::AdamWSegment>& s,
                    const trident::AdamWStep& h, uint16_t* working) override {
    T("adamw_update", [&] { k_.adamw_update(p, g, m, v, n, s, h, working); });
  }

 private:
  template <class F>
  void T(const char* what, const F& f) {
    const auto t0 = clock_type::now();
    f();
    k_.fence();  // an asynchronous backend (CUDA) is timed to the end of the operation
    auto& e = table_[what];
    e.seconds += seconds_since(t0);
    e.calls += 1;
  }
  trident::Kernels& k_;
  std::map<std::string, Entry> table_;
};

// ---- shared state: one Kokkos backend and one Trainer, built on first use ----
std::unique_ptr<trident::Kernels> g_kernels;
std::unique_ptr<trident::Trainer> g_trainer;
int64_t g_step = 0;
double g_flops_per_step = 0;

trident::Trainer& trainer() {
  if (!g_trainer) {
    const trident::Config cfg = bench_config();
    g_trainer = std::make_unique<trident::Trainer>(cfg, *g_kernels);
    g_flops_per_step = trident::model_flops_per_token(cfg.model) * double(cfg.tokens_per_step());
    g_trainer->train_step(++g_step);  // warm-up: first touch of every buffer, BLAS thread start
  }
  return *g_trainer;
}

// CPU seconds of this process, all threads (BLAS workers included).
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Each iteration's wall time, its median as a counter, and GFLOP/s of that median.
template <class F>
void timed_loop(benchmark::State& state, double flops_per_iter, const F& body) {
  std::vector<double> ms, cpu_ms;
  for (auto _ : state) {
    const auto t0 = clock_type::now();
    const double c0 = process_cpu_seconds();
    body();
    const double s = seconds_since(t0);
    cpu_ms.push_back((process_cpu_seconds() - c0) * 1e3);
    state.SetIterationTime(s);
    ms.push_back(s * 1e3);
  }
  const double med = median(ms);
  state.counters["median_ms"] = med;
  state.counters["cpu_median_ms"] = median(cpu_ms);  // process CPU time: robust to load at 1 thread
  state.counters["GFLOP/s"] = med > 0 ? flops_per_iter / (med / 1e3) / 1e9 : 0;
}

void BM_train_step(benchmark::State& state) {
  auto& tr = trainer();
  timed_loop(state, g_flops_per_step, [&] { benchmark::DoNotOptimize(tr.train_step(++g_step).loss); });
  state.counters["tok/s"] = 4.0 * 64 / (state.counters["median_ms"] / 1e3);
}

void BM_forward_backward(benchmark::State& state) {
  auto& tr = trainer();
  auto& m = tr.model();
  std::vector<int32_t> in(4 * 64), tg(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = int32_t((i * 7919) % 50257);
    tg[i] = int32_t((i * 104729 + 1) % 50257);
  }
  timed_loop(state, g_flops_per_step, [&] {
    g_kernels->fill(m.grads(), 0.f, m.layout().total());
    benchmark::DoNotOptimize(m.forward_backward(in.data(), tg.data(), 1.0f / 256));
    g_kernels->fence();
  });
}

void BM_optimizer(benchmark::State& state) {
  auto& tr = trainer();
  auto& m = tr.model();
  const int64_t n = m.layout().total();
  int64_t step = 100;
  timed_loop(state, 0, [&] {
    const double norm = m.gradient_norm();
    trident::clip_gradients(*g_kernels, m.grads(), n, norm, 1.0);
    tr.optimizer().update(m.params(), m.grads(), 1e-4, ++step);
    g_kernels->fence();
  });
  state.counters.erase("GFLOP/s");
}

// ---- the step's GEMMs as plain cblas_sgemm ----
struct StepGemms {
  static constexpr int B = 4, T = 64, L = 12, C = 768, NH = 12, HD = C / NH, F = 4 * C, V = 50257, N = B * T;
  std::vector<float> x, w, y, dy, dx, dw, qkv, att, atty, datt, dqkv;
  StepGemms()
      : x(size_t(N) * F, 0.01f), w(size_t(V) * C, 0.02f), y(size_t(N) * V), dy(size_t(N) * V, 0.001f),
        dx(size_t(N) * F), dw(size_t(V) * C), qkv(size_t(N) * 3 * C, 0.1f), att(size_t(B) * NH * T * T, 0.01f),
        atty(size_t(N) * C), datt(size_t(B) * NH * T * T), dqkv(size_t(N) * 3 * C) {}

  // One Linear: forward y[N,OC] = x[N,IC] W[OC,IC]^T; backward dx[N,IC] += dy W, dW[OC,IC] += dy^T x.
  void linear_fwd(int IC, int OC) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, IC, 1.f, x.data(), IC, w.data(), IC, 0.f, y.data(), OC);
  }
  void linear_bwd(int IC, int OC) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IC, OC, 1.f, dy.data(), OC, w.data(), IC, 1.f,
                dx.data(), IC);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, IC, N, 1.f, dy.data(), OC, x.data(), IC, 1.f, dw.data(),
                IC);
  }
  // Attention products per (b, h), reading q/k/v in place from qkv [B, T, 3C] (leading dimension 3C).
  void attention_fwd() {
    const int ld = 3 * C;
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < NH; ++h) {
        const float* q = qkv.data() + size_t(b) * T * ld + h * HD;
        const float* k = q + C;
        const float* v = q + 2 * C;
        float* p = att.data() + (size_t(b) * NH + h) * T * T;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HD, 1.f, q, ld, k, ld, 0.f, p, T);  // S = Q K^T
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HD, T, 1.f, p, T, v, ld, 0.f,
                    atty.data() + size_t(b) * T * C + h * HD, C);  // Y = P V
      }
  }
  void attention_bwd() {
    const int ld = 3 * C;
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < NH; ++h) {
        const size_t o = size_t(b) * T * ld + h * HD;
        const float *q = qkv.data() + o, *k = q + C, *v = q + 2 * C;
        float *dq = dqkv.data() + o, *dk = dq + C, *dv = dq + 2 * C;
        const float* p = att.data() + (size_t(b) * NH + h) * T * T;
        float* dp = datt.data() + (size_t(b) * NH + h) * T * T;
        const float* dyh = atty.data() + size_t(b) * T * C + h * HD;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HD, 1.f, dyh, C, v, ld, 0.f, dp, T);    // dP = dY V^T
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HD, T, 1.f, p, T, dyh, C, 1.f, dv, ld);    // dV = P^T dY
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HD, T, 1.f, dp, T, k, ld, 1.f, dq, ld);  // dQ = dS K
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HD, T, 1.f, dp, T, q, ld, 1.f, dk, ld);    // dK = dS^T Q
      }
  }
  static double linear_flops() { return 2.0 * N * (double(C) * 3 * C + double(C) * C + double(C) * F + double(F) * C); }
  static double lm_head_flops() { return 2.0 * N * double(C) * V; }
  static double attention_flops() { return 4.0 * B * NH * double(T) * T * HD; }
  static double forward_flops() { return L * (linear_flops() + attention_flops()) + lm_head_flops(); }
  static double step_flops() { return 3 * forward_flops(); }
};

void BM_step_gemms_sgemm(benchmark::State& state) {
  StepGemms g;
  using S = StepGemms;
  double t_lin = 0, t_att = 0, t_head = 0;
  auto timed = [](double& acc, const auto& f) {
    const auto t0 = clock_type::now();
    f();
    acc += seconds_since(t0);
  };
  auto step = [&] {
    for (int l = 0; l < S::L; ++l) {
      timed(t_lin, [&] { g.linear_fwd(S::C, 3 * S::C); });
      timed(t_att, [&] { g.attention_fwd(); });
      timed(t_lin, [&] {
        g.linear_fwd(S::C, S::C);
        g.linear_fwd(S::C, S::F);
        g.linear_fwd(S::F, S::C);
      });
    }
    timed(t_head, [&] {
      g.linear_fwd(S::C, S::V);
      g.linear_bwd(S::C, S::V);
    });
    for (int l = 0; l < S::L; ++l) {
      timed(t_lin, [&] {
        g.linear_bwd(S::F, S::C);
        g.linear_bwd(S::C, S::F);
        g.linear_bwd(S::C, S::C);
      });
      timed(t_att, [&] { g.attention_bwd(); });
      timed(t_lin, [&] { g.linear_bwd(S::C, 3 * S::C); });
    }
  };
  step();  // warm-up
  t_lin = t_att = t_head = 0;
  timed_loop(state, S::step_flops(), step);
  const double it = double(state.iterations());
  state.counters["layers_GFLOP/s"] = 3 * S::L * S::linear_flops() / (t_lin / it) / 1e9;
  state.counters["attention_GFLOP/s"] = 3 * S::L * S::attention_flops() / (t_att / it) / 1e9;
  state.counters["lm_head_GFLOP/s"] = 3 * S::lm_head_flops() / (t_head / it) / 1e9;
  state.counters["GEMM_GFLOP"] = S::step_flops() / 1e9;
}

// Start-up cost: the seeded initialisation of the whole model on the host (what the Trainer constructor
// runs on every rank before sharding), one iteration.
void BM_init_parameters(benchmark::State& state) {
  const trident::Config cfg = bench_config();
  const trident::ParameterLayout layout(trident::GptShapes::from(cfg.model));
  std::vector<float> host(layout.total());
  timed_loop(state, 0, [&] { trident::init_parameters(layout, cfg.model.init_std, cfg.model.seed, host.data()); });
  state.counters.erase("GFLOP/s");
  state.counters["ns/parameter"] = state.counters["median_ms"] * 1e6 / double(layout.total());
}

void register_benchmarks(int iterations) {
  benchmark::RegisterBenchmark("BM_init_parameters", BM_init_parameters)
      ->UseManualTime()
      ->Iterations(1)
      ->Unit(benchmark::kMillisecond);
  for (auto* b : {benchmark::RegisterBenchmark("BM_train_step", BM_train_step),
                  benchmark::RegisterBenchmark("BM_step_gemms_sgemm", BM_step_gemms_sgemm),
                  benchmark::RegisterBenchmark("BM_forward_backward", BM_forward_backward),
                  benchmark::RegisterBenchmark("BM_optimizer", BM_optimizer)})
    b->UseManualTime()->Iterations(iterations)->Unit(benchmark::kMillisecond);
}

// ---- extra modes ----
int profile_mode(int steps) {
  TimedKernels timed(*g_kernels);
  const trident::Config cfg = bench_config();
  trident::Trainer tr(cfg, timed);
  tr.train_step(1);
  timed.reset();
  double total = 0;
  std::vector<double> ms;
  for (int s = 2; s < 2 + steps; ++s) {
    const auto t0 = clock_type::now();
    tr.train_step(s);
    ms.push_back(seconds_since(t0) * 1e3);
    total += ms.back();
  }
  std::vector<std::pair<std::string, TimedKernels::Entry>> rows(timed.table().begin(), timed.table().end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double kernels = 0, gemm = 0;
  std::printf("profile: %d steps after 1 warm-up, OPENBLAS_NUM_THREADS=%s, blas core %s; step median %.1f ms\n",
              steps, std::getenv("OPENBLAS_NUM_THREADS") ? std::getenv("OPENBLAS_NUM_THREADS") : "(unset)",
              trident::blas_core_name().c_str(), median(ms));
  std::printf("| operation | calls/step | ms/step | share of step |\n|---|---|---|---|\n");
  for (const auto& [name, e] : rows) {
    const double per = e.seconds * 1e3 / steps;
    kernels += per;
    if (name.rfind("matmul", 0) == 0) gemm += per;
    std::printf("| %s | %lld | %.2f | %.1f%% |\n", name.c_str(), (long long)(e.calls / steps), per,
                100 * per / (total / steps));
  }
  const double step_ms = total / steps;
  std::printf("| (outside kernels: host loss sum, loops, sampler) | - | %.2f | %.1f%% |\n", step_ms - kernels,
              100 * (step_ms - kernels) / step_ms);
  std::printf("| **step (mean)** | - | %.2f | 100%% |\n", step_ms);
  std::printf("matmul_forward + matmul_backward (sgemm + bias add + bias grad): %.1f%% of the step\n",
              100 * gemm / step_ms);
  return 0;
}

// Current resident set size (VmRSS) of this process in bytes; 0 when unknown.
int64_t current_rss_bytes() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  long long kib = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmRSS: %lld kB", &kib) == 1) break;
  std::fclose(f);
  return int64_t(kib) * 1024;
}

int activation_report(const char* mode) {
  const trident::Config cfg = bench_config(mode);
  trident::Trainer tr(cfg, *g_kernels);
  const int64_t hwm_built = trident::peak_rss_bytes(), rss_built = current_rss_bytes();
  tr.train_step(1);
  tr.train_step(2);
  const auto a = tr.model().activation_bytes();
  const double mib = 1048576.0;
  std::printf(
      "activation_report recompute=%s saved_MiB=%.2f scratch_MiB=%.2f total_MiB=%.2f peak_rss_MiB=%.1f "
      "rss_after_steps_MiB=%.1f peak_rss_after_construction_MiB=%.1f rss_after_construction_MiB=%.1f\n",
      mode, a.saved / mib, a.scratch / mib, (a.saved + a.scratch) / mib, trident::peak_rss_bytes() / mib,
      current_rss_bytes() / mib, hwm_built / mib, rss_built / mib);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  trident::tune_blas_for_this_cpu(argc, argv);  // may re-exec with OPENBLAS_CORETYPE set (not on a known CPU)
  // A re-execution above leaves SIGUSR1, SIGTERM and SIGINT blocked; this program handles none of
  // them itself, so their default actions (and any handler a test installs) apply again.
  trident::unblock_stop_signals();
  trident::start_mpi(&argc, &argv, TRIDENT_BUILD_MPI_THREADS);
  int rc = 0;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    g_kernels = trident::make_kokkos_kernels();
    std::string profile, act;
    int iterations = 5;
    std::vector<char*> rest;
    for (int i = 0; i < argc; ++i) {
      const std::string a = argv[i];
      if (a.rfind("--profile=", 0) == 0) {
        profile = a.substr(10);
      } else if (a.rfind("--activation_report=", 0) == 0) {
        act = a.substr(20);
      } else if (a.rfind("--step_iterations=", 0) == 0) {
        iterations = std::max(1, std::atoi(a.c_str() + 18));
      } else {
        rest.push_back(argv[i]);
      }
    }
    int n = int(rest.size());
    rest.push_back(nullptr);
    try {
      if (!profile.empty()) {
        rc = profile_mode(std::max(1, std::atoi(profile.c_str())));
      } else if (!act.empty()) {
        rc = activation_report(act.c_str());
      } else {
        benchmark::Initialize(&n, rest.data());
        if (benchmark::ReportUnrecognizedArguments(n, rest.data())) {
          rc = 1;
        } else {
          const char* th = std::getenv("OPENBLAS_NUM_THREADS");
          benchmark::AddCustomContext("blas_core", trident::blas_core_name());
          benchmark::AddCustomContext("OPENBLAS_NUM_THREADS", th ? th : "(unset)");
          benchmark::AddCustomContext("backend", g_kernels->name());
          benchmark::AddCustomContext("shape", "GPT-2 124M: L 12, C 768, NH 12, V 50257, T 64, B 4");
          register_benchmarks(iterations);
          benchmark::RunSpecifiedBenchmarks();
        }
        benchmark::Shutdown();
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_step: %s\n", e.what());
      rc = 1;
    }
    g_trainer.reset();
    g_kernels.reset();
  }
  MPI_Finalize();
  return rc;
}
