// Every op of the Kernels interface on the CUDA backend against the Kokkos backend, with the same
// random inputs at GPT-2-like shapes (N = 2 x 64 rows, C 768 or 128, vocabulary 50304 padded from
// 50257, T up to 256 in attention; grouped-query attention, RMSNorm, RoPE and SwiGLU too): each output and every gradient within 1e-5 in relative L2 norm,
// ||cuda - kokkos||_2 / ||kokkos||_2; and every CUDA op run twice gives bit-identical results.
// Why 1e-5: both backends compute in fp32 and sum the same terms in different orders (cuBLAS vs
// OpenBLAS blocking, flash tiles of different sizes, block vs chunk partials), so results differ by a
// few float roundings of the op's reductions: ~1e-7 relative per rounding, ~1e-6 after the longest
// chains here (attention backward, a 768-term GEMM). A wrong index, term or missed accumulation moves
// the norm by 1e-3 or more. Device-side double sums are compared at 1e-12 (both accumulate in double).
// Gradients start from zero here, so the comparison sees the gradient alone (accumulation is checked
// per backend in test_kernels / test_kernels_cuda).
// Built in CUDA builds only; skips (visibly) without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernel_test_util.hpp"

namespace trident::kt {
namespace {

// The outputs of one run of an op on one backend, by name.
using Outputs = std::vector<std::pair<std::string, VecF>>;

double relative_l2(const VecF& got, const VecF& want) {
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = double(got[i]) - double(want[i]);
    diff += d * d;
    norm += double(want[i]) * double(want[i]);
  }
  return std::sqrt(diff) / std::sqrt(norm);
}

class CrossBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device: the cross-backend tests compare a GPU run with the CPU";
    cpu = make_kokkos_kernels();
    gpu = make_cuda_kernels();
  }
  void TearDown() override {
    gpu.reset();
    cpu.reset();
  }

  // op(k) allocates its inputs on k from fixed seeds, runs, and returns its outputs. It runs once on
  // Kokkos and twice on CUDA.
  void expect_backends_agree(const std::function<Outputs(Kernels&)>& op, double tol = 1e-5) {
    const Outputs want = op(*cpu), got = op(*gpu), again = op(*gpu);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      const auto& [name, w] = want[i];
      ASSERT_EQ(got[i].second.size(), w.size()) << name;
      EXPECT_GT(max_abs(to_double(w)), 1e-3) << name << ": degenerate reference";
      const double rel = relative_l2(got[i].second, w);
      EXPECT_LE(rel, tol) << name << ": CUDA vs Kokkos";
      std::printf("  %-28s relative L2 difference %.2e\n", name.c_str(), rel);
      EXPECT_TRUE(same_bits(got[i].second, again[i].second)) << name << ": two CUDA runs differ";
    }
  }

  std::unique_ptr<Kernels> cpu, gpu;
};

constexpr int64_t B = 2, T = 64, N = B * T, C = 768, F = 3072, V = 50257, Vp = 50304;

TEST_F(CrossBackendTest, Elementwise) {
  const int64_t n = 100003;
  expect_backends_agree([&](Kernels& k) -> Outputs {
    Buf a(k, random_vec(n, 1)), b(k, random_vec(n, 2)), out(k, n);
    k.add(out.get(), a.get(), b.get(), n);
    k.accumulate(out.get(), a.get(), n);
    k.scale(a.get(), -0.37f, n);
    return {{"add+accumulate", out.host()}, {"scale", a.host()}};
  });
}

TEST_F(CrossBackendTest, DeviceSideSums) {
  const int64_t n = 12 * C * C + 13 * C;  // one GPT-2 block's parameters
  auto run = [&](Kernels& k) {
    Buf x(k, random_vec(n, 3));
    double* acc = k.alloc_double(2);
    k.sum_squares_into(acc, x.get(), n);
    k.sum_squares_into(acc, x.get(), n / 3);  // accumulates
    k.sum_into(acc + 1, x.get(), n);
    std::vector<double> h(2);
    k.copy_to_host_double(h.data(), acc, 2);
    k.free(acc);
    return h;
  };
  const auto want = run(*cpu), got = run(*gpu), again = run(*gpu);
  // Both accumulate float inputs in double: the orders differ by ~n eps_double relative to sum |terms|.
  EXPECT_NEAR(got[0], want[0], 1e-12 * want[0]);
  EXPECT_NEAR(got[1], want[1], 1e-12 * double(n));  // sum |x| ~ n/2
  EXPECT_EQ(std::memcmp(got.data(), again.data(), 2 * sizeof(double)), 0) << "two CUDA runs differ";
}

TEST_F(CrossBackendTest, Embeddings) {
  const int64_t Ce = 128, vb = 1000, vc = V - 2000;  // a vocabulary shard: some tokens fall outside
  std::vector<int32_t> tok(N);
  std::mt19937 gen(4);
  std::uniform_int_distribution<int32_t> d(0, V - 1);
  for (auto& t : tok) t = d(gen);
  tok[0] = tok[5] = tok[9] = vb + 7;  // repeated tokens: the backward sums rows
  expect_backends_agree([&](Kernels& k) -> Outputs {
    IntBuf tokens(k, tok);
    Buf wte(k, random_vec(vc * Ce, 5)), wpe(k, random_vec((T + 3) * Ce, 6)), out(k, N * Ce);
    k.embedding_forward(out.get(), tokens.get(), wte.get(), vb, vc, N, Ce);
    k.position_forward(out.get(), wpe.get(), B, T, Ce, 3);
    Buf dout(k, random_vec(N * Ce, 7)), dwte(k, vc * Ce), dwpe(k, (T + 3) * Ce);
    k.embedding_backward(dwte.get(), dout.get(), tokens.get(), vb, vc, N, Ce);
    k.position_backward(dwpe.get(), dout.get(), B, T, Ce, 3);
    return {{"embedding+position", out.host()}, {"dwte", dwte.host()}, {"dwpe", dwpe.host()}};
  });
}

TEST_F(CrossBackendTest, LayerNorm) {
  expect_backends_agree([&](Kernels& k) -> Outputs {
    Buf x(k, random_vec(N * C, 10, -2.0f, 2.0f)), w(k, random_vec(C, 11, 0.5f, 1.5f)), b(k, random_vec(C, 12));
    Buf out(k, N * C), mean(k, N), rstd(k, N), dout(k, random_vec(N * C, 13));
    k.layernorm_forward(out.get(), mean.get(), rstd.get(), x.get(), w.get(), b.get(), N, C, 1e-5f);
    Buf dx(k, N * C), dw(k, C), db(k, C);
    k.layernorm_backward(dx.get(), dw.get(), db.get(), dout.get(), x.get(), w.get(), mean.get(), rstd.get(), N, C);
    return {{"out", out.host()}, {"mean", mean.host()}, {"rstd", rstd.host()},
            {"dinp", dx.host()},  {"dweight", dw.host()}, {"dbias", db.host()}};
  });
}

TEST_F(CrossBackendTest, Matmul) {
  // The QKV projection (with bias) and the tied lm_head at C 128 (no bias, padded vocabulary).
  for (const auto& [IC, OC, bias] : {std::tuple<int64_t, int64_t, bool>{C, 3 * C, true}, {128, Vp, false}}) {
    SCOPED_TRACE("IC " + std::to_string(IC) + " OC " + std::to_string(OC));
    expect_backends_agree([&, IC = IC, OC = OC, bias = bias](Kernels& k) -> Outputs {
      Buf x(k, random_vec(N * IC, 20)), w(k, random_vec(OC * IC, 21, -0.05f, 0.05f)), b(k, random_vec(OC, 22));
      Buf out(k, N * OC), dout(k, random_vec(N * OC, 23));
      k.matmul_forward(out.get(), x.get(), w.get(), bias ? b.get() : nullptr, N, IC, OC);
      Buf dx(k, N * IC), dw(k, OC * IC), db(k, OC);
      k.matmul_backward(dx.get(), dw.get(), bias ? db.get() : nullptr, dout.get(), x.get(), w.get(), N, IC, OC);
      Outputs o = {{"out", out.host()}, {"dinp", dx.host()}, {"dweight", dw.host()}};
      if (bias) o.push_back({"dbias", db.host()});
      return o;
    });
  }
}

TEST_F(CrossBackendTest, Attention) {
  // GPT-2 head size; T 64 (the step's), T 256 (several CPU tiles, several GPU tiles); NH 12 at T 64;
  // grouped-query (KVH < NH: the dk/dv of a key/value head sum its group's query heads) and multi-query.
  for (const auto& [Bs, Ts, NH, KVH] :
       {std::tuple<int64_t, int64_t, int64_t, int64_t>{2, 64, 12, 12}, {1, 256, 4, 4}, {2, 129, 2, 2}, {2, 64, 12, 3},
        {1, 256, 4, 1}, {2, 129, 6, 2}}) {
    SCOPED_TRACE("B " + std::to_string(Bs) + " T " + std::to_string(Ts) + " NH " + std::to_string(NH) + " KVH " +
                 std::to_string(KVH));
    const int64_t HD = 64, Cs = NH * HD, RS = (NH + 2 * KVH) * HD;
    expect_backends_agree([&, Bs = Bs, Ts = Ts, NH = NH, KVH = KVH](Kernels& k) -> Outputs {
      Buf qkv(k, random_vec(Bs * Ts * RS, 30, -2.0f, 2.0f)), out(k, Bs * Ts * Cs), lse(k, Bs * NH * Ts);
      k.attention_forward(out.get(), lse.get(), qkv.get(), Bs, Ts, NH, KVH, HD);
      Buf rows(k, Bs * 5 * Cs);
      k.attention_forward_rows(rows.get(), qkv.get(), Bs, Ts, NH, KVH, HD, Ts - 5, 5);
      Buf dout(k, random_vec(Bs * Ts * Cs, 31)), dqkv(k, Bs * Ts * RS);
      k.attention_backward(dqkv.get(), dout.get(), qkv.get(), out.get(), lse.get(), Bs, Ts, NH, KVH, HD);
      return {{"out", out.host()}, {"lse", lse.host()}, {"rows", rows.host()}, {"dqkv", dqkv.host()}};
    });
  }
}

TEST_F(CrossBackendTest, RmsNorm) {
  expect_backends_agree([&](Kernels& k) -> Outputs {
    Buf x(k, random_vec(N * C, 14, -2.0f, 2.0f)), w(k, random_vec(C, 15, 0.5f, 1.5f));
    Buf out(k, N * C), rstd(k, N), dout(k, random_vec(N * C, 16));
    k.rmsnorm_forward(out.get(), rstd.get(), x.get(), w.get(), N, C, 1e-6f);
    Buf dx(k, N * C), dw(k, C);
    k.rmsnorm_backward(dx.get(), dw.get(), dout.get(), x.get(), w.get(), rstd.get(), N, C);
    return {{"out", out.host()}, {"rstd", rstd.host()}, {"dinp", dx.host()}, {"dweight", dw.host()}};
  });
}

TEST_F(CrossBackendTest, RopeOnARowRange) {
  // Llama's head size 128, grouped-query heads, rows [5, 5 + 50) of T 64 (the rest untouched).
  const int64_t NH = 8, KVH = 2, HD = 128, RS = (NH + 2 * KVH) * HD;
  const std::vector<float> table = rope_table(500000.0, HD, T);
  expect_backends_agree([&](Kernels& k) -> Outputs {
    Buf tab(k, table), qkv(k, random_vec(N * RS, 17)), g(k, random_vec(N * RS, 18));
    k.rope_forward(qkv.get(), tab.get(), B, T, NH, KVH, HD, 5, 50);
    k.rope_backward(g.get(), tab.get(), B, T, NH, KVH, HD, 5, 50);
    return {{"rotated qkv", qkv.host()}, {"rotated gradient", g.host()}};
  });
}

TEST_F(CrossBackendTest, SwiGlu) {
  expect_backends_agree([&](Kernels& k) -> Outputs {
    Buf x(k, random_vec(N * 2 * F, 42, -5.0f, 5.0f)), out(k, N * F), dout(k, random_vec(N * F, 43));
    Buf dx(k, N * 2 * F);
    k.swiglu_forward(out.get(), x.get(), N, F);
    k.swiglu_backward(dx.get(), x.get(), dout.get(), N, F);
    return {{"out", out.host()}, {"dinp", dx.host()}};
  });
}

TEST_F(CrossBackendTest, Gelu) {
  const int64_t n = N * F;
  expect_backends_agree([&](Kernels& k) -> Outputs {
    Buf x(k, random_vec(n, 40, -5.0f, 5.0f)), out(k, n), dout(k, random_vec(n, 41)), dx(k, n);
    k.gelu_forward(out.get(), x.get(), n);
    k.gelu_backward(dx.get(), x.get(), dout.get(), n);
    return {{"out", out.host()}, {"dinp", dx.host()}};
  });
}

TEST_F(CrossBackendTest, CrossEntropyOverPaddedVocabulary) {
  std::vector<int32_t> targets(N);
  std::mt19937 gen(50);
  std::uniform_int_distribution<int32_t> d(0, V - 1);
  for (auto& t : targets) t = d(gen);
  expect_backends_agree([&](Kernels& k) -> Outputs {
    Buf logits(k, random_vec(N * Vp, 51, -4.0f, 4.0f)), rowmax(k, N), sumexp(k, N), tl(k, N), losses(k, N);
    IntBuf tg(k, targets);
    k.xent_row_max(rowmax.get(), logits.get(), N, Vp, V);
    k.xent_sumexp_target(sumexp.get(), tl.get(), logits.get(), rowmax.get(), tg.get(), 0, N, Vp, V);
    k.xent_loss_grad(losses.get(), logits.get(), rowmax.get(), sumexp.get(), tl.get(), tg.get(), 0, 1.0f / N, N,
                     Vp, V);
    return {{"rowmax", rowmax.host()}, {"sumexp", sumexp.host()}, {"target_logit", tl.host()},
            {"losses", losses.host()}, {"dlogits", logits.host()}};
  });
}

TEST_F(CrossBackendTest, AdamWOverSeveralSteps) {
  const int64_t n = 100003;
  expect_backends_agree([&](Kernels& k) -> Outputs {
    Buf p(k, random_vec(n, 60)), g(k, n), m(k, n), v(k, n);
    for (int step = 1; step <= 4; ++step) {
      g.set(random_vec(n, 60 + uint32_t(step)));
      // two tensors' segments: decayed, then not (biases, norms)
      k.adamw_update(p.get(), g.get(), m.get(), v.get(), n, {{0, 0.1f}, {n / 3, 0.f}}, {6e-4f, 0.9f, 0.95f, 1e-8f, step},
                     nullptr);
    }
    return {{"param", p.host()}, {"m", m.host()}, {"v", v.host()}};
  });
}

}  // namespace
}  // namespace trident::kt
