// Kernel benchmarks of the Kokkos backend at GPT-2 124M shapes (B 4, T 64, C 768, NH 12, V 50257,
// F 3072), with a plain cblas_sgemm of each GEMM shape as the reference for what BLAS alone gives.
// Counters: FLOP/s for GEMM-bound ops, bytes_per_second (minimum traffic) for memory-bound ones.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/device_buffers.hpp"
#include "core/blas_runtime.hpp"
#include "kernels.hpp"
#include "train/stop_signals.hpp"

namespace {

constexpr int64_t B = 4, T = 64, C = 768, NH = 12, HD = C / NH, V = 50257, Vp = 50304, F = 3072, N = B * T;
// Parameters of one GPT-2 124M transformer block (the AdamW / norm benchmarks use this length).
constexpr int64_t kBlockParams = 12 * C * C + 13 * C;

trident::Kernels* K = nullptr;

// The shared backend buffers (common/device_buffers.hpp) on this program's backend.
struct Buf : trident::bench::DeviceBuf {
  explicit Buf(int64_t n, float lo = -1.0f, float hi = 1.0f, uint32_t seed = 1) : DeviceBuf(*K, n, lo, hi, seed) {}
};
struct Tokens : trident::bench::DeviceTokens {
  Tokens(int64_t n, int32_t vocab) : DeviceTokens(*K, n, vocab) {}
};

void flops(benchmark::State& s, double per_iter) {
  s.counters["FLOP/s"] = benchmark::Counter(per_iter, benchmark::Counter::kIsIterationInvariantRate);
}
void bytes(benchmark::State& s, double per_iter) { s.SetBytesProcessed(int64_t(per_iter) * s.iterations()); }

// ---- matmul: Args {IC, OC}; the five GEMM shapes of a GPT-2 step ----
void MatmulShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"IC", "OC"});
  b->Args({C, 3 * C});  // qkv
  b->Args({C, C});      // attention projection
  b->Args({C, F});      // fc
  b->Args({F, C});      // fc projection
  b->Args({C, V});      // lm_head (tied wte, no bias)
  b->Unit(benchmark::kMillisecond);
}

void BM_matmul_forward(benchmark::State& s) {
  const int64_t IC = s.range(0), OC = s.range(1);
  Buf x(N * IC), w(OC * IC), bias(OC), out(N * OC, 0, 0);
  const float* bp = OC == V ? nullptr : bias.get();
  for (auto _ : s) {
    K->matmul_forward(out.get(), x.get(), w.get(), bp, N, IC, OC);
    K->fence();
  }
  flops(s, 2.0 * N * IC * OC);
}
BENCHMARK(BM_matmul_forward)->Apply(MatmulShapes);

void BM_sgemm_forward_reference(benchmark::State& s) {
  const int64_t IC = s.range(0), OC = s.range(1);
  Buf x(N * IC), w(OC * IC), out(N * OC, 0, 0);
  for (auto _ : s)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, x.get(), IC, w.get(), IC, 0.0f,
                out.get(), OC);
  flops(s, 2.0 * N * IC * OC);
}
BENCHMARK(BM_sgemm_forward_reference)->Apply(MatmulShapes);

void BM_matmul_backward(benchmark::State& s) {
  const int64_t IC = s.range(0), OC = s.range(1);
  Buf x(N * IC), w(OC * IC), dout(N * OC), dx(N * IC, 0, 0), dw(OC * IC, 0, 0), db(OC, 0, 0);
  float* dbp = OC == V ? nullptr : db.get();
  for (auto _ : s) {
    K->matmul_backward(dx.get(), dw.get(), dbp, dout.get(), x.get(), w.get(), N, IC, OC);
    K->fence();
  }
  flops(s, 4.0 * N * IC * OC);
}
BENCHMARK(BM_matmul_backward)->Apply(MatmulShapes);

void BM_sgemm_backward_reference(benchmark::State& s) {
  const int64_t IC = s.range(0), OC = s.range(1);
  Buf x(N * IC), w(OC * IC), dout(N * OC), dx(N * IC, 0, 0), dw(OC * IC, 0, 0);
  for (auto _ : s) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IC, OC, 1.0f, dout.get(), OC, w.get(), IC, 1.0f,
                dx.get(), IC);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, IC, N, 1.0f, dout.get(), OC, x.get(), IC, 1.0f,
                dw.get(), IC);
  }
  flops(s, 4.0 * N * IC * OC);
}
BENCHMARK(BM_sgemm_backward_reference)->Apply(MatmulShapes);

// ---- attention: Args {B, T, KVH}; the step's T = 64 and the GPT-2 124M context T = 1024, multi-head
// (KVH = NH) and grouped-query (KVH = NH / 4, Llama's ratio) ----
// FLOP/s counts the full T x T products per query head (4 B NH T^2 HD forward, 8 backward) whatever the
// kernel executes (the tiled kernel skips the tiles above the diagonal), so rates compare as times.
void AttentionShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"B", "T", "KVH"});
  b->Args({B, T, NH});
  b->Args({4, 1024, NH});
  b->Args({4, 1024, NH / 4});
  b->Args({8, 1024, NH});
  b->Unit(benchmark::kMillisecond);
}

void BM_attention_forward(benchmark::State& s) {
  const int64_t Bs = s.range(0), Ts = s.range(1), KVH = s.range(2), Ns = Bs * Ts, RS = (NH + 2 * KVH) * HD;
  Buf qkv(Ns * RS), out(Ns * C, 0, 0), lse(Bs * NH * Ts, 0, 0);
  for (auto _ : s) {
    K->attention_forward(out.get(), lse.get(), qkv.get(), Bs, Ts, NH, KVH, HD);
    K->fence();
  }
  flops(s, 4.0 * Bs * NH * Ts * Ts * HD);
}
BENCHMARK(BM_attention_forward)->Apply(AttentionShapes);

void BM_attention_backward(benchmark::State& s) {
  const int64_t Bs = s.range(0), Ts = s.range(1), KVH = s.range(2), Ns = Bs * Ts, RS = (NH + 2 * KVH) * HD;
  Buf qkv(Ns * RS), out(Ns * C, 0, 0), lse(Bs * NH * Ts, 0, 0), dout(Ns * C), dqkv(Ns * RS, 0, 0);
  K->attention_forward(out.get(), lse.get(), qkv.get(), Bs, Ts, NH, KVH, HD);
  for (auto _ : s) {
    K->attention_backward(dqkv.get(), dout.get(), qkv.get(), out.get(), lse.get(), Bs, Ts, NH, KVH, HD);
    K->fence();
  }
  flops(s, 8.0 * Bs * NH * Ts * Ts * HD);
}
BENCHMARK(BM_attention_backward)->Apply(AttentionShapes);

// Reference: the 2 sgemm of the forward, per head, on already contiguous [T,HD] buffers.
void BM_sgemm_attention_forward_reference(benchmark::State& s) {
  Buf q(B * NH * T * HD), k(B * NH * T * HD), v(B * NH * T * HD), att(B * NH * T * T, 0, 0), y(B * NH * T * HD, 0, 0);
  for (auto _ : s)
    for (int64_t bh = 0; bh < B * NH; ++bh) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HD, 0.125f, q.get() + bh * T * HD, HD,
                  k.get() + bh * T * HD, HD, 0.0f, att.get() + bh * T * T, T);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HD, T, 1.0f, att.get() + bh * T * T, T,
                  v.get() + bh * T * HD, HD, 0.0f, y.get() + bh * T * HD, HD);
    }
  flops(s, 4.0 * B * NH * T * T * HD);
}
BENCHMARK(BM_sgemm_attention_forward_reference)->Unit(benchmark::kMicrosecond);

// ---- LayerNorm ----
void BM_layernorm_forward(benchmark::State& s) {
  Buf x(N * C), w(C), b(C), out(N * C, 0, 0), mean(N, 0, 0), rstd(N, 0, 0);
  for (auto _ : s) {
    K->layernorm_forward(out.get(), mean.get(), rstd.get(), x.get(), w.get(), b.get(), N, C, 1e-5f);
    K->fence();
  }
  bytes(s, 2.0 * N * C * 4);
}
BENCHMARK(BM_layernorm_forward)->Unit(benchmark::kMicrosecond);

void BM_layernorm_backward(benchmark::State& s) {
  Buf x(N * C), w(C), b(C), out(N * C, 0, 0), mean(N, 0, 0), rstd(N, 0, 0), dout(N * C), dx(N * C, 0, 0),
      dw(C, 0, 0), db(C, 0, 0);
  K->layernorm_forward(out.get(), mean.get(), rstd.get(), x.get(), w.get(), b.get(), N, C, 1e-5f);
  for (auto _ : s) {
    K->layernorm_backward(dx.get(), dw.get(), db.get(), dout.get(), x.get(), w.get(), mean.get(), rstd.get(), N, C);
    K->fence();
  }
  bytes(s, 4.0 * N * C * 4);  // read dout, inp, dinp; write dinp
}
BENCHMARK(BM_layernorm_backward)->Unit(benchmark::kMicrosecond);

// The residual add and the LayerNorm that reads the sum: unfused (accumulate, then layernorm_forward)
// against fused (residual_layernorm_forward, the same bits). Each iteration starts x from the same
// values (a copy, timed in both) so the sums stay bounded.
void BM_residual_then_layernorm(benchmark::State& s) {
  Buf x0(N * C), x(N * C, 0, 0), r(N * C), w(C), b(C), out(N * C, 0, 0), mean(N, 0, 0), rstd(N, 0, 0);
  for (auto _ : s) {
    K->copy(x.get(), x0.get(), N * C);
    K->accumulate(x.get(), r.get(), N * C);
    K->layernorm_forward(out.get(), mean.get(), rstd.get(), x.get(), w.get(), b.get(), N, C, 1e-5f);
    K->fence();
  }
  bytes(s, 7.0 * N * C * 4);  // copy 2; add: read x, r, write x; norm: read x, write out
}
BENCHMARK(BM_residual_then_layernorm)->Unit(benchmark::kMicrosecond);

void BM_residual_layernorm_fused(benchmark::State& s) {
  Buf x0(N * C), x(N * C, 0, 0), r(N * C), w(C), b(C), out(N * C, 0, 0), mean(N, 0, 0), rstd(N, 0, 0);
  for (auto _ : s) {
    K->copy(x.get(), x0.get(), N * C);
    K->residual_layernorm_forward(x.get(), r.get(), out.get(), mean.get(), rstd.get(), w.get(), b.get(), N, C, 1e-5f);
    K->fence();
  }
  bytes(s, 6.0 * N * C * 4);  // copy 2; read x, r, write x and out
}
BENCHMARK(BM_residual_layernorm_fused)->Unit(benchmark::kMicrosecond);

// ---- RMSNorm (Llama) ----
void BM_rmsnorm_forward(benchmark::State& s) {
  Buf x(N * C), w(C), out(N * C, 0, 0), rstd(N, 0, 0);
  for (auto _ : s) {
    K->rmsnorm_forward(out.get(), rstd.get(), x.get(), w.get(), N, C, 1e-5f);
    K->fence();
  }
  bytes(s, 2.0 * N * C * 4);
}
BENCHMARK(BM_rmsnorm_forward)->Unit(benchmark::kMicrosecond);

void BM_rmsnorm_backward(benchmark::State& s) {
  Buf x(N * C), w(C), out(N * C, 0, 0), rstd(N, 0, 0), dout(N * C), dx(N * C, 0, 0), dw(C, 0, 0);
  K->rmsnorm_forward(out.get(), rstd.get(), x.get(), w.get(), N, C, 1e-5f);
  for (auto _ : s) {
    K->rmsnorm_backward(dx.get(), dw.get(), dout.get(), x.get(), w.get(), rstd.get(), N, C);
    K->fence();
  }
  bytes(s, 4.0 * N * C * 4);  // read dout, inp, dinp; write dinp
}
BENCHMARK(BM_rmsnorm_backward)->Unit(benchmark::kMicrosecond);

// ---- RoPE on the q and k heads of the step's qkv (NH = KVH, T rows) ----
void BM_rope_forward(benchmark::State& s) {
  const std::vector<float> table = trident::rope_table(10000.0, HD, T);
  Buf qkv(N * 3 * C), tab(int64_t(table.size()), 0, 0);
  K->copy_to_device(tab.get(), table.data(), int64_t(table.size()));
  for (auto _ : s) {
    K->rope_forward(qkv.get(), tab.get(), B, T, NH, NH, HD, 0, T);
    K->fence();
  }
  bytes(s, 4.0 * N * C * 4);  // read and write q and k
}
BENCHMARK(BM_rope_forward)->Unit(benchmark::kMicrosecond);

// ---- GELU on the [N, F] MLP activation ----
void BM_gelu_forward(benchmark::State& s) {
  Buf x(N * F), out(N * F, 0, 0);
  for (auto _ : s) {
    K->gelu_forward(out.get(), x.get(), N * F);
    K->fence();
  }
  bytes(s, 2.0 * N * F * 4);
}
BENCHMARK(BM_gelu_forward)->Unit(benchmark::kMicrosecond);

void BM_gelu_backward(benchmark::State& s) {
  Buf x(N * F), dout(N * F), dx(N * F, 0, 0);
  for (auto _ : s) {
    K->gelu_backward(dx.get(), x.get(), dout.get(), N * F);
    K->fence();
  }
  bytes(s, 4.0 * N * F * 4);
}
BENCHMARK(BM_gelu_backward)->Unit(benchmark::kMicrosecond);

// ---- SwiGLU on [N, 2F] -> [N, F] ----
void BM_swiglu_forward(benchmark::State& s) {
  Buf x(N * 2 * F), out(N * F, 0, 0);
  for (auto _ : s) {
    K->swiglu_forward(out.get(), x.get(), N, F);
    K->fence();
  }
  bytes(s, 3.0 * N * F * 4);
}
BENCHMARK(BM_swiglu_forward)->Unit(benchmark::kMicrosecond);

void BM_swiglu_backward(benchmark::State& s) {
  Buf x(N * 2 * F), dout(N * F), dx(N * 2 * F, 0, 0);
  for (auto _ : s) {
    K->swiglu_backward(dx.get(), x.get(), dout.get(), N, F);
    K->fence();
  }
  bytes(s, 7.0 * N * F * 4);  // read inp (2), dout, dinp (2); write dinp (2)
}
BENCHMARK(BM_swiglu_backward)->Unit(benchmark::kMicrosecond);

// ---- embeddings ----
void BM_embedding_forward(benchmark::State& s) {
  Tokens tok(N, V);
  Buf wte(V * C), wpe(1024 * C), out(N * C, 0, 0);
  for (auto _ : s) {
    K->embedding_forward(out.get(), tok.get(), wte.get(), 0, V, N, C);
    K->position_forward(out.get(), wpe.get(), B, T, C, 0);
    K->fence();
  }
  bytes(s, (2.0 + 3.0) * N * C * 4);  // token: read row, write; position: read wpe, read+write out
}
BENCHMARK(BM_embedding_forward)->Unit(benchmark::kMicrosecond);

void BM_embedding_backward(benchmark::State& s) {
  Tokens tok(N, V);
  Buf dwte(V * C, 0, 0), dwpe(1024 * C, 0, 0), dout(N * C);
  for (auto _ : s) {
    K->embedding_backward(dwte.get(), dout.get(), tok.get(), 0, V, N, C);
    K->position_backward(dwpe.get(), dout.get(), B, T, C, 0);
    K->fence();
  }
  bytes(s, 3.0 * N * C * 4 + (1.0 * N * C + 2.0 * T * C) * 4);
}
BENCHMARK(BM_embedding_backward)->Unit(benchmark::kMicrosecond);

// ---- cross-entropy over the padded [N, Vp] logits ----
struct Xent {
  Tokens targets{N, V};
  Buf logits{N * Vp, -4.0f, 4.0f}, rowmax{N, 0, 0}, sumexp{N, 0, 0}, tl{N, 0, 0}, losses{N, 0, 0};
};

void BM_xent_row_max(benchmark::State& s) {
  Xent x;
  for (auto _ : s) {
    K->xent_row_max(x.rowmax.get(), x.logits.get(), N, Vp, V);
    K->fence();
  }
  bytes(s, 1.0 * N * V * 4);
}
BENCHMARK(BM_xent_row_max)->Unit(benchmark::kMicrosecond);

void BM_xent_sumexp_target(benchmark::State& s) {
  Xent x;
  K->xent_row_max(x.rowmax.get(), x.logits.get(), N, Vp, V);
  for (auto _ : s) {
    K->xent_sumexp_target(x.sumexp.get(), x.tl.get(), x.logits.get(), x.rowmax.get(), x.targets.get(), 0, N, Vp, V);
    K->fence();
  }
  bytes(s, 1.0 * N * V * 4);
}
BENCHMARK(BM_xent_sumexp_target)->Unit(benchmark::kMicrosecond);

void BM_xent_loss_grad(benchmark::State& s) {
  Xent x;
  K->xent_row_max(x.rowmax.get(), x.logits.get(), N, Vp, V);
  K->xent_sumexp_target(x.sumexp.get(), x.tl.get(), x.logits.get(), x.rowmax.get(), x.targets.get(), 0, N, Vp, V);
  for (auto _ : s) {  // after the first iteration logits hold gradients: same work, finite values
    K->xent_loss_grad(x.losses.get(), x.logits.get(), x.rowmax.get(), x.sumexp.get(), x.tl.get(), x.targets.get(), 0,
                      1.0f / N, N, Vp, V);
    K->fence();
  }
  bytes(s, 2.0 * N * Vp * 4);
}
BENCHMARK(BM_xent_loss_grad)->Unit(benchmark::kMicrosecond);

// ---- optimizer and elementwise ----
// One GPT-2 block's AdamW in one multi-tensor pass: its 12 tensors in layout order (ln_1, c_attn,
// c_proj, ln_2, c_fc, mlp c_proj; weights decayed, biases and norms not). Arg 1: with the bf16 working
// copy written in the same pass (train.precision = "bf16": p is then the fp32 master).
void BM_adamw_update(benchmark::State& s) {
  const int64_t n = kBlockParams;
  const bool working = s.range(0) == 1;
  std::vector<trident::AdamWSegment> segments;
  int64_t at = 0;
  for (const auto& [size, wd] : std::vector<std::pair<int64_t, float>>{
           {2 * C, 0.f}, {3 * C * C, 0.1f}, {3 * C, 0.f}, {C * C, 0.1f}, {C, 0.f}, {2 * C, 0.f},
           {4 * C * C, 0.1f}, {4 * C, 0.f}, {4 * C * C, 0.1f}, {C, 0.f}}) {
    segments.push_back({at, wd});
    at += size;
  }
  Buf p(n), g(n), m(n, 0, 0), v(n, 0, 0);
  uint16_t* w = working ? K->alloc_bf16(n) : nullptr;
  int64_t step = 0;
  for (auto _ : s) {
    K->adamw_update(p.get(), g.get(), m.get(), v.get(), n, segments, {6e-4f, 0.9f, 0.95f, 1e-8f, ++step}, w);
    K->fence();
  }
  if (w) K->free(w);
  bytes(s, (7.0 * 4 + (working ? 2.0 : 0.0)) * n);  // read p, g, m, v; write p, m, v (and the bf16 working copy)
}
BENCHMARK(BM_adamw_update)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

void BM_sum_squares(benchmark::State& s) {
  const int64_t n = kBlockParams;
  Buf x(n);
  double* acc = K->alloc_double(1);  // device-side accumulator, as the step's gradient norm uses it
  for (auto _ : s) {
    K->sum_squares_into(acc, x.get(), n);
    K->fence();
  }
  K->free(acc);
  bytes(s, 1.0 * n * 4);
}
BENCHMARK(BM_sum_squares)->Unit(benchmark::kMicrosecond);

void BM_residual_add(benchmark::State& s) {
  Buf a(N * C), b(N * C), out(N * C, 0, 0);
  for (auto _ : s) {
    K->add(out.get(), a.get(), b.get(), N * C);
    K->fence();
  }
  bytes(s, 3.0 * N * C * 4);
}
BENCHMARK(BM_residual_add)->Unit(benchmark::kMicrosecond);

void BM_accumulate(benchmark::State& s) {
  const int64_t n = kBlockParams;
  Buf y(n), x(n);
  for (auto _ : s) {
    K->accumulate(y.get(), x.get(), n);
    K->fence();
  }
  bytes(s, 3.0 * n * 4);
}
BENCHMARK(BM_accumulate)->Unit(benchmark::kMicrosecond);

void BM_scale(benchmark::State& s) {
  const int64_t n = kBlockParams;
  Buf x(n);
  for (auto _ : s) {
    K->scale(x.get(), 0.999f, n);
    K->fence();
  }
  bytes(s, 2.0 * n * 4);
}
BENCHMARK(BM_scale)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  trident::tune_blas_for_this_cpu(argc, argv);  // may re-exec with OPENBLAS_CORETYPE set
  // A re-execution above leaves SIGUSR1, SIGTERM and SIGINT blocked; this program handles none of
  // them itself, so their default actions (and any handler a test installs) apply again.
  trident::unblock_stop_signals();
  Kokkos::initialize(argc, argv);
  int rc = 0;
  {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
      rc = 1;
    } else {
      benchmark::AddCustomContext("blas_core", trident::blas_core_name());
      auto kernels = trident::make_kokkos_kernels();
      benchmark::AddCustomContext("backend", kernels->name());
      K = kernels.get();
      benchmark::RunSpecifiedBenchmarks();
      K = nullptr;
    }
    benchmark::Shutdown();
  }
  Kokkos::finalize();
  return rc;
}
