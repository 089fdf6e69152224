// Matmul (and that its GEMMs reach the BLAS library), LayerNorm, GELU.
#include <gtest/gtest.h>

#include "common/bf16_arithmetic.hpp"
#include "common/test_support.hpp"

#include <Kokkos_Core.hpp>
#include <limits>
#include <string>

#include "kernel_test_util.hpp"

namespace trident::kt {
namespace {

class LayersTest : public KernelTest {};

// ---------------------------------------------------------------- matmul

TEST_P(LayersTest, MatmulForwardMatchesReference) {
  const int64_t N = 5, IC = 7, OC = 6;
  const VecF x = random_vec(N * IC, 20), w = random_vec(OC * IC, 21), b = random_vec(OC, 22);
  Buf X(*k, x), W(*k, w), Bb(*k, b), out(*k, N * OC);
  const VecD bd = to_double(b);
  k->matmul_forward(out.get(), X.get(), W.get(), Bb.get(), N, IC, OC);
  // 7 products of |.| <= 1 plus a bias: float error <= 8 * 6e-8 * 8 ~ 4e-6.
  EXPECT_TRUE(close(out.host(), ref_matmul(to_double(x), to_double(w), &bd, N, IC, OC), 1e-5, 1e-5));
  k->fill(out.get(), 123.0f, N * OC);  // forward overwrites, it does not accumulate
  k->matmul_forward(out.get(), X.get(), W.get(), nullptr, N, IC, OC);
  EXPECT_TRUE(close(out.host(), ref_matmul(to_double(x), to_double(w), nullptr, N, IC, OC), 1e-5, 1e-5));
}

TEST_P(LayersTest, MatmulForwardLargerShapeMatchesReference) {
  // Big enough for the BLAS blocking/packing paths. 96 products: error <= 96 * 6e-8 * sum|x w|
  // (~24 for uniform(-1,1) data) ~ 1.4e-4 worst case.
  const int64_t N = 64, IC = 96, OC = 80;
  const VecF x = random_vec(N * IC, 23), w = random_vec(OC * IC, 24), b = random_vec(OC, 25);
  Buf X(*k, x), W(*k, w), Bb(*k, b), out(*k, N * OC);
  const VecD bd = to_double(b);
  k->matmul_forward(out.get(), X.get(), W.get(), Bb.get(), N, IC, OC);
  EXPECT_TRUE(close(out.host(), ref_matmul(to_double(x), to_double(w), &bd, N, IC, OC), 1.5e-4, 0));
}

struct MatmulCase {
  static constexpr int64_t N = 5, IC = 7, OC = 6;
  VecF x = random_vec(N * IC, 30), w = random_vec(OC * IC, 31), b = random_vec(OC, 32);
  VecF R = random_vec(N * OC, 33);
  // FD gradients of L = sum(ref_matmul(x, w, b) * R) w.r.t. x, w, b.
  VecD fd_x, fd_w, fd_b;
  MatmulCase() {
    const VecD xd = to_double(x), wd = to_double(w), bd = to_double(b);
    fd_x = fd_gradient([&](const VecD& v) { return dot(ref_matmul(v, wd, &bd, N, IC, OC), R); }, xd);
    fd_w = fd_gradient([&](const VecD& v) { return dot(ref_matmul(xd, v, &bd, N, IC, OC), R); }, wd);
    fd_b = fd_gradient([&](const VecD& v) { return dot(ref_matmul(xd, wd, &v, N, IC, OC), R); }, bd);
  }
};

TEST_P(LayersTest, MatmulBackwardMatchesFiniteDifferences) {
  MatmulCase c;
  const int64_t N = c.N, IC = c.IC, OC = c.OC;
  Buf X(*k, c.x), W(*k, c.w), dout(*k, c.R), dX(*k, N * IC), dW(*k, OC * IC), dB(*k, OC);
  k->matmul_backward(dX.get(), dW.get(), dB.get(), dout.get(), X.get(), W.get(), N, IC, OC);
  // Float sums of <= 6 products of |.| <= 1: error ~1e-6; 1e-4 still flags any wrong term.
  EXPECT_TRUE(close(dX.host(), c.fd_x, 1e-4, 1e-4));
  EXPECT_TRUE(close(dW.host(), c.fd_w, 1e-4, 1e-4));
  EXPECT_TRUE(close(dB.host(), c.fd_b, 1e-4, 1e-4));
}

TEST_P(LayersTest, MatmulBackwardAccumulatesAndSkipsNullOutputs) {
  MatmulCase c;
  const int64_t N = c.N, IC = c.IC, OC = c.OC;
  Buf X(*k, c.x), W(*k, c.w), dout(*k, c.R);
  // Start from non-zero gradients G0: the result must be G0 + 2 g after two calls.
  const VecF g0x = random_vec(N * IC, 34), g0w = random_vec(OC * IC, 35), g0b = random_vec(OC, 36);
  Buf dX(*k, g0x), dW(*k, g0w), dB(*k, g0b);
  for (int rep = 0; rep < 2; ++rep)
    k->matmul_backward(dX.get(), dW.get(), dB.get(), dout.get(), X.get(), W.get(), N, IC, OC);
  auto plus2 = [](const VecF& g0, const VecD& g) {
    VecD r(g.size());
    for (size_t i = 0; i < g.size(); ++i) r[i] = g0[i] + 2.0 * g[i];
    return r;
  };
  EXPECT_TRUE(close(dX.host(), plus2(g0x, c.fd_x), 2e-4, 1e-4));
  EXPECT_TRUE(close(dW.host(), plus2(g0w, c.fd_w), 2e-4, 1e-4));
  EXPECT_TRUE(close(dB.host(), plus2(g0b, c.fd_b), 2e-4, 1e-4));

  // Each output may be null; the others are still produced.
  Buf dX1(*k, N * IC), dW1(*k, OC * IC), dB1(*k, OC);
  k->matmul_backward(dX1.get(), nullptr, nullptr, dout.get(), X.get(), W.get(), N, IC, OC);
  k->matmul_backward(nullptr, dW1.get(), nullptr, dout.get(), X.get(), W.get(), N, IC, OC);
  k->matmul_backward(nullptr, nullptr, dB1.get(), dout.get(), X.get(), W.get(), N, IC, OC);
  EXPECT_TRUE(close(dX1.host(), c.fd_x, 1e-4, 1e-4));
  EXPECT_TRUE(close(dW1.host(), c.fd_w, 1e-4, 1e-4));
  EXPECT_TRUE(close(dB1.host(), c.fd_b, 1e-4, 1e-4));
}

TEST_P(LayersTest, MatmulIsDeterministic) {
  const int64_t N = 48, IC = 64, OC = 40;
  const VecF x = random_vec(N * IC, 37), w = random_vec(OC * IC, 38), b = random_vec(OC, 39),
             r = random_vec(N * OC, 40);
  Buf X(*k, x), W(*k, w), Bb(*k, b), dout(*k, r);
  VecF first[4];
  for (int rep = 0; rep < 2; ++rep) {
    Buf out(*k, N * OC), dX(*k, N * IC), dW(*k, OC * IC), dB(*k, OC);
    k->matmul_forward(out.get(), X.get(), W.get(), Bb.get(), N, IC, OC);
    k->matmul_backward(dX.get(), dW.get(), dB.get(), dout.get(), X.get(), W.get(), N, IC, OC);
    const VecF got[4] = {out.host(), dX.host(), dW.host(), dB.host()};
    for (int i = 0; i < 4; ++i) {
      if (rep == 0)
        first[i] = got[i];
      else
        EXPECT_TRUE(same_bits(first[i], got[i])) << "output " << i;
    }
  }
}

// Every Kokkos GEMM must reach the BLAS library: KokkosBlas::gemm pushes a profiling region named after
// the implementation it picked ("[TPL_BLAS,float]" for sgemm, "[ETI]"/"[noETI]" for its own kernel).
// Attention calls cblas_sgemm itself (strided head operands, see kokkos/attention.hpp): no region.
std::vector<std::string>* g_regions = nullptr;
void record_region(const char* name) {
  if (g_regions) g_regions->push_back(name);
}

TEST_P(LayersTest, AllGemmsDispatchToBlas) {
  if (backend() != "kokkos") TRIDENT_SKIP_NOT_APPLICABLE("KokkosBlas dispatch is a property of the Kokkos backend");
  std::vector<std::string> regions;
  g_regions = &regions;
  Kokkos::Tools::Experimental::set_push_region_callback(record_region);
  const int64_t N = 6, IC = 8, OC = 5;
  Buf X(*k, random_vec(N * IC, 41)), W(*k, random_vec(OC * IC, 42)), out(*k, N * OC);
  Buf dX(*k, N * IC), dW(*k, OC * IC), dB(*k, OC);
  k->matmul_forward(out.get(), X.get(), W.get(), nullptr, N, IC, OC);
  k->matmul_backward(dX.get(), dW.get(), dB.get(), out.get(), X.get(), W.get(), N, IC, OC);
  const int64_t B = 2, T = 5, NH = 3, HD = 4, C = NH * HD;
  Buf qkv(*k, random_vec(B * T * 3 * C, 43)), y(*k, B * T * C), lse(*k, B * NH * T), dqkv(*k, B * T * 3 * C);
  k->attention_forward(y.get(), lse.get(), qkv.get(), B, T, NH, NH, HD);
  k->attention_backward(dqkv.get(), y.get(), qkv.get(), y.get(), lse.get(), B, T, NH, NH, HD);
  k->fence();
  Kokkos::Tools::Experimental::set_push_region_callback(nullptr);
  g_regions = nullptr;
  int blas = 0, other = 0;
  for (const auto& r : regions) {
    if (r == "KokkosBlas::gemm[TPL_BLAS,float]")
      ++blas;
    else if (r.rfind("KokkosBlas::gemm", 0) == 0)
      ++other;
  }
  EXPECT_EQ(blas, 1 + 2);  // matmul: 1 forward + 2 backward
  EXPECT_EQ(other, 0);
}

// ---------------------------------------------------------------- LayerNorm

struct LayerNormCase {
  static constexpr int64_t N = 4, C = 9;
  VecF x = random_vec(N * C, 50, -2.0f, 2.0f), w = random_vec(C, 51, 0.5f, 1.5f), b = random_vec(C, 52);
  VecF R = random_vec(N * C, 53);
};

TEST_P(LayersTest, LayerNormForwardMatchesReference) {
  LayerNormCase c;
  const int64_t N = c.N, C = c.C;
  Buf X(*k, c.x), W(*k, c.w), Bb(*k, c.b), out(*k, N * C), mean(*k, N), rstd(*k, N);
  k->layernorm_forward(out.get(), mean.get(), rstd.get(), X.get(), W.get(), Bb.get(), N, C, 1e-5f);
  VecD m, rs;
  const VecD ref = ref_layernorm(to_double(c.x), to_double(c.w), to_double(c.b), N, C, &m, &rs);
  // Statistics in double, outputs rounded to float once or twice: a few ulp.
  EXPECT_TRUE(close(out.host(), ref, 1e-6, 1e-6));
  EXPECT_TRUE(close(mean.host(), m, 1e-7, 1e-6));
  EXPECT_TRUE(close(rstd.host(), rs, 0, 1e-6));
}

// The residual add fused into the norm: x keeps x + residual, bit for bit the host's fp32 sum, and the
// norm's outputs and statistics are the bits of accumulate() followed by the unfused norm (LayerNorm
// and RMSNorm), and LayerNorm's equal the double reference of that sum.
TEST_P(LayersTest, ResidualNormForwardIsTheAddThenTheNorm) {
  LayerNormCase c;
  const int64_t N = c.N, C = c.C;
  VecF sum(c.x.size());
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = c.x[i] + c.R[i];
  Buf W(*k, c.w), Bb(*k, c.b), R(*k, c.R);
  for (bool rms : {false, true}) {
    SCOPED_TRACE(rms ? "RMSNorm" : "LayerNorm");
    Buf X1(*k, c.x), X2(*k, c.x), out1(*k, N * C), out2(*k, N * C), mean1(*k, N), mean2(*k, N), rstd1(*k, N),
        rstd2(*k, N);
    k->accumulate(X1.get(), R.get(), N * C);
    if (rms) {
      k->rmsnorm_forward(out1.get(), rstd1.get(), X1.get(), W.get(), N, C, 1e-5f);
      k->residual_rmsnorm_forward(X2.get(), R.get(), out2.get(), rstd2.get(), W.get(), N, C, 1e-5f);
    } else {
      k->layernorm_forward(out1.get(), mean1.get(), rstd1.get(), X1.get(), W.get(), Bb.get(), N, C, 1e-5f);
      k->residual_layernorm_forward(X2.get(), R.get(), out2.get(), mean2.get(), rstd2.get(), W.get(), Bb.get(), N, C,
                                    1e-5f);
      EXPECT_TRUE(same_bits(mean2.host(), mean1.host()));
      const VecD ref = ref_layernorm(to_double(sum), to_double(c.w), to_double(c.b), N, C, nullptr, nullptr);
      EXPECT_TRUE(close(out2.host(), ref, 1e-6, 1e-6));
    }
    EXPECT_TRUE(same_bits(X2.host(), sum));
    EXPECT_TRUE(same_bits(out2.host(), out1.host()));
    EXPECT_TRUE(same_bits(rstd2.host(), rstd1.host()));
  }
}

TEST_P(LayersTest, LayerNormLargeOffsetStaysAccurate) {
  // x = 1000 + u, |u| <= 1, C = 768: a single-pass float E[x^2] - E[x]^2 would lose every digit of
  // the variance (~1/3 against rounding of ~1e6 * 6e-8 * sqrt(768)); double two-pass keeps ~1e-6.
  const int64_t N = 3, C = 768;
  VecF x = random_vec(N * C, 54);
  for (auto& v : x) v += 1000.0f;
  const VecF w = random_vec(C, 55, 0.5f, 1.5f), b = random_vec(C, 56);
  Buf X(*k, x), W(*k, w), Bb(*k, b), out(*k, N * C), mean(*k, N), rstd(*k, N);
  k->layernorm_forward(out.get(), mean.get(), rstd.get(), X.get(), W.get(), Bb.get(), N, C, 1e-5f);
  VecD m, rs;
  const VecD ref = ref_layernorm(to_double(x), to_double(w), to_double(b), N, C, &m, &rs);
  EXPECT_TRUE(close(out.host(), ref, 1e-5, 1e-5));
  EXPECT_TRUE(close(rstd.host(), rs, 0, 1e-6));
}

TEST_P(LayersTest, LayerNormBackwardMatchesFiniteDifferences) {
  LayerNormCase c;
  const int64_t N = c.N, C = c.C;
  const VecD xd = to_double(c.x), wd = to_double(c.w), bd = to_double(c.b);
  const VecD fx = fd_gradient([&](const VecD& v) { return dot(ref_layernorm(v, wd, bd, N, C), c.R); }, xd);
  const VecD fw = fd_gradient([&](const VecD& v) { return dot(ref_layernorm(xd, v, bd, N, C), c.R); }, wd);
  const VecD fb = fd_gradient([&](const VecD& v) { return dot(ref_layernorm(xd, wd, v, N, C), c.R); }, bd);

  Buf X(*k, c.x), W(*k, c.w), Bb(*k, c.b), out(*k, N * C), mean(*k, N), rstd(*k, N), dout(*k, c.R);
  k->layernorm_forward(out.get(), mean.get(), rstd.get(), X.get(), W.get(), Bb.get(), N, C, 1e-5f);
  Buf dX(*k, N * C), dW(*k, C), dB(*k, C);
  k->layernorm_backward(dX.get(), dW.get(), dB.get(), dout.get(), X.get(), W.get(), mean.get(), rstd.get(), N, C);
  // Double internals; float inputs/outputs and the saved float mean/rstd (rel. 6e-8): error ~1e-6.
  const VecF gx = dX.host(), gw = dW.host(), gb = dB.host();
  EXPECT_TRUE(close(gx, fx, 1e-5, 1e-4));
  EXPECT_TRUE(close(gw, fw, 1e-5, 1e-4));
  EXPECT_TRUE(close(gb, fb, 1e-5, 1e-4));

  // Accumulates: a second call doubles every gradient; and bit-identical on a rerun.
  k->layernorm_backward(dX.get(), dW.get(), dB.get(), dout.get(), X.get(), W.get(), mean.get(), rstd.get(), N, C);
  EXPECT_TRUE(same_bits(dX.host(), to_float(scaled(gx, 2.0))));
  EXPECT_TRUE(same_bits(dW.host(), to_float(scaled(gw, 2.0))));
  EXPECT_TRUE(same_bits(dB.host(), to_float(scaled(gb, 2.0))));
  Buf dX2(*k, N * C), dW2(*k, C), dB2(*k, C), out2(*k, N * C);
  k->layernorm_forward(out2.get(), mean.get(), rstd.get(), X.get(), W.get(), Bb.get(), N, C, 1e-5f);
  EXPECT_TRUE(same_bits(out2.host(), out.host()));
  k->layernorm_backward(dX2.get(), dW2.get(), dB2.get(), dout.get(), X.get(), W.get(), mean.get(), rstd.get(), N, C);
  EXPECT_TRUE(same_bits(dX2.host(), gx));
  EXPECT_TRUE(same_bits(dW2.host(), gw));
  EXPECT_TRUE(same_bits(dB2.host(), gb));
}

// ---------------------------------------------------------------- GELU

TEST_P(LayersTest, GeluForwardMatchesReference) {
  VecF x = random_vec(200, 60, -6.0f, 6.0f);
  x.insert(x.end(), {0.0f, 1.0f, -1.0f, 20.0f, -20.0f, 1e-4f});
  Buf X(*k, x), out(*k, int64_t(x.size()));
  k->gelu_forward(out.get(), X.get(), int64_t(x.size()));
  // tanhf is within a few ulp; near x ~ -3 the factor 1 + tanh cancels, costing ~1e-7 absolute.
  const VecF o = out.host();
  EXPECT_TRUE(close(o, ref_gelu(to_double(x)), 3e-7, 2e-6));
  // Spot values: gelu(1) = 0.8411919906 (tanh form), gelu(20) = 20, gelu(-20) = 0.
  EXPECT_NEAR(o[201], 0.8411919906, 2e-7);
  EXPECT_EQ(o[203], 20.0f);
  EXPECT_EQ(o[204], 0.0f);
}

TEST_P(LayersTest, GeluBackwardMatchesFiniteDifferencesAndAccumulates) {
  const int64_t n = 64;
  const VecF x = random_vec(n, 61, -5.0f, 5.0f), R = random_vec(n, 62);
  const VecD fd = fd_gradient([&](const VecD& v) { return dot(ref_gelu(v), R); }, to_double(x));
  Buf X(*k, x), dout(*k, R), dX(*k, n);
  k->gelu_backward(dX.get(), X.get(), dout.get(), n);
  const VecF g = dX.host();
  EXPECT_TRUE(close(g, fd, 1e-6, 1e-5));  // float evaluation of the closed-form derivative
  k->gelu_backward(dX.get(), X.get(), dout.get(), n);
  EXPECT_TRUE(same_bits(dX.host(), to_float(scaled(g, 2.0))));  // g + g is exact
}

// bf16 storage's rounding done by the op that produces the output (Kernels::*_rounded): every norm and
// activation gives the bits of the op followed by round_to_bf16 of its output - the output, the kept
// patterns, the statistics and the residual sum - with the patterns kept and without (packed null). On
// the CUDA backend this tests the fused kernels (the rounding in the op's own pass), on Kokkos the
// Kernels defaults. Rows of 130 columns: each warp lane of the CUDA norms takes several columns.
TEST_P(LayersTest, RoundedNormsAndActivationsAreTheOpThenTheRounding) {
  const int64_t N = 37, C = 130, n = N * C;
  const VecF x = random_vec(n, 60, -3.0f, 3.0f), residual = random_vec(n, 61), w = random_vec(C, 62, 0.5f, 1.5f),
             b = random_vec(C, 63);
  Buf W(*k, w), Bb(*k, b), R(*k, residual);
  enum Op { kLayerNorm, kRmsNorm, kResidualLayerNorm, kResidualRmsNorm, kGelu, kSwiglu };
  const char* names[] = {"layernorm", "rmsnorm", "residual_layernorm", "residual_rmsnorm", "gelu", "swiglu"};
  // What one call leaves: the output, its patterns widened (when kept), mean, rstd and the input (x + residual).
  const auto run = [&](Op op, bool fused, bool keep_patterns) {
    Buf X(*k, x), out(*k, n), mean(*k, N), rstd(*k, N), widened(*k, n);
    uint16_t* packed = keep_patterns ? k->alloc_bf16(n) : nullptr;
    float* o = out.get();
    const int64_t outputs = op == kSwiglu ? n / 2 : n;  // SwiGLU: [N, 2F] -> [N, F], F = C / 2
    switch (op) {
      case kLayerNorm:
        if (fused) k->layernorm_forward_rounded(packed, o, mean.get(), rstd.get(), X.get(), W.get(), Bb.get(), N, C, 1e-5f);
        else k->layernorm_forward(o, mean.get(), rstd.get(), X.get(), W.get(), Bb.get(), N, C, 1e-5f);
        break;
      case kRmsNorm:
        if (fused) k->rmsnorm_forward_rounded(packed, o, rstd.get(), X.get(), W.get(), N, C, 1e-5f);
        else k->rmsnorm_forward(o, rstd.get(), X.get(), W.get(), N, C, 1e-5f);
        break;
      case kResidualLayerNorm:
        if (fused)
          k->residual_layernorm_forward_rounded(packed, X.get(), R.get(), o, mean.get(), rstd.get(), W.get(), Bb.get(),
                                                N, C, 1e-5f);
        else k->residual_layernorm_forward(X.get(), R.get(), o, mean.get(), rstd.get(), W.get(), Bb.get(), N, C, 1e-5f);
        break;
      case kResidualRmsNorm:
        if (fused) k->residual_rmsnorm_forward_rounded(packed, X.get(), R.get(), o, rstd.get(), W.get(), N, C, 1e-5f);
        else k->residual_rmsnorm_forward(X.get(), R.get(), o, rstd.get(), W.get(), N, C, 1e-5f);
        break;
      case kGelu:
        if (fused) k->gelu_forward_rounded(packed, o, X.get(), n);
        else k->gelu_forward(o, X.get(), n);
        break;
      case kSwiglu:
        if (fused) k->swiglu_forward_rounded(packed, o, X.get(), N, C / 2);
        else k->swiglu_forward(o, X.get(), N, C / 2);
        break;
    }
    if (!fused) k->round_to_bf16(o, packed, outputs);
    if (packed) k->unpack_bf16(widened.get(), packed, outputs);
    std::vector<VecF> left = {out.host(), widened.host(), mean.host(), rstd.host(), X.host()};
    k->free(packed);
    left[0].resize(size_t(outputs));
    left[1].resize(keep_patterns ? size_t(outputs) : 0);
    return left;
  };
  const char* parts[] = {"output", "patterns", "mean", "rstd", "input"};
  for (Op op : {kLayerNorm, kRmsNorm, kResidualLayerNorm, kResidualRmsNorm, kGelu, kSwiglu})
    for (bool keep_patterns : {true, false}) {
      SCOPED_TRACE(std::string(names[op]) + (keep_patterns ? ", patterns kept" : ", patterns not kept"));
      const auto fused = run(op, true, keep_patterns), expected = run(op, false, keep_patterns);
      for (size_t i = 0; i < fused.size(); ++i) EXPECT_TRUE(same_bits(fused[i], expected[i])) << parts[i];
      if (keep_patterns) {
        EXPECT_TRUE(same_bits(fused[1], fused[0])) << "the patterns are the rounded output";
      }
      VecF rounded_again = fused[0];
      for (float& v : rounded_again) v = test::bf16_by_arithmetic(v);
      EXPECT_TRUE(same_bits(rounded_again, fused[0])) << "the output holds bf16 values";
    }
}

// The backward ops that write their input gradient (Kernels::*_backward_overwrite) give the values of a fill
// of dinp with 0 followed by the accumulating op, whatever dinp held before (here NaN: a read of it would
// show), while matmul's dweight and dbias still accumulate (onto random starting values). matmul in fp32 and
// in bf16 (the CUDA backend's bf16 GEMMs read patterns and converted copies), at OC = 0 too (an empty sum:
// dinp = 0). A zero sum may come out as -0 where the fill gives +0: compared as values, every bit otherwise.
// The same for attention's dqkv. On the CUDA backend this tests the dinp GEMM with beta 0 and the kernels'
// write, on Kokkos the defaults.
TEST_P(LayersTest, BackwardOverwriteIsTheFillThenTheAccumulatingOp) {
  const auto same_values = [](VecF a, VecF b) {
    for (VecF* v : {&a, &b})
      for (float& x : *v) x = x == 0.0f ? 0.0f : x;  // -0 -> +0
    return same_bits(a, b);
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t N = 37, IC = 130;
  for (MatmulPrecision precision : {MatmulPrecision::FP32, MatmulPrecision::BF16})
    for (int64_t OC : {int64_t(70), int64_t(0)}) {
      SCOPED_TRACE(std::string("matmul, ") + (precision == MatmulPrecision::BF16 ? "bf16" : "fp32") +
                   ", OC = " + std::to_string(OC));
      k->set_matmul_precision(precision);
      const VecF x = random_vec(N * IC, 70), w = random_vec(OC * IC, 71), dy = random_vec(N * OC, 72),
                 g0w = random_vec(OC * IC, 73), g0b = random_vec(OC, 74);
      const auto run = [&](bool overwrite) {
        Buf X(*k, x), W(*k, w), dout(*k, dy), dW(*k, g0w), dB(*k, g0b);
        Buf dX(*k, VecF(size_t(N * IC), overwrite ? nan : 0.0f));
        if (overwrite)
          k->matmul_backward_overwrite(dX.get(), dW.get(), dB.get(), dout.get(), X.get(), W.get(), N, IC, OC);
        else
          k->matmul_backward(dX.get(), dW.get(), dB.get(), dout.get(), X.get(), W.get(), N, IC, OC);
        return std::vector<VecF>{dX.host(), dW.host(), dB.host()};
      };
      const auto written = run(true), expected = run(false);
      EXPECT_TRUE(same_values(written[0], expected[0])) << "dinp";
      EXPECT_TRUE(same_bits(written[1], expected[1])) << "dweight";
      EXPECT_TRUE(same_bits(written[2], expected[2])) << "dbias";
    }
  k->set_matmul_precision(MatmulPrecision::FP32);
  const int64_t n = N * IC;
  const VecF x = random_vec(n, 75, -3.0f, 3.0f), dy = random_vec(n, 76);
  for (bool swiglu : {false, true}) {
    SCOPED_TRACE(swiglu ? "swiglu" : "gelu");
    const int64_t F = IC / 2, outputs = swiglu ? N * F : n;  // SwiGLU: dinp [N, 2F] from dout [N, F]
    const auto run = [&](bool overwrite) {
      Buf X(*k, x), dout(*k, dy), dX(*k, VecF(size_t(n), overwrite ? nan : 0.0f));
      if (swiglu && overwrite) k->swiglu_backward_overwrite(dX.get(), X.get(), dout.get(), N, F);
      if (swiglu && !overwrite) k->swiglu_backward(dX.get(), X.get(), dout.get(), N, F);
      if (!swiglu && overwrite) k->gelu_backward_overwrite(dX.get(), X.get(), dout.get(), outputs);
      if (!swiglu && !overwrite) k->gelu_backward(dX.get(), X.get(), dout.get(), outputs);
      return dX.host();
    };
    EXPECT_TRUE(same_values(run(true), run(false)));
  }
  // Attention at head size 64, grouped (4 query heads over 2 kv heads), T = 70 (a partial tile): under bf16
  // the CUDA backend's tensor-core kernels write dqkv, under fp32 its accumulating kernels run after a fill.
  const int64_t B = 2, T = 70, NH = 4, KVH = 2, HD = 64, RS = (NH + 2 * KVH) * HD;
  const VecF qkv = random_vec(B * T * RS, 77), dout_a = random_vec(B * T * NH * HD, 78);
  for (MatmulPrecision precision : {MatmulPrecision::FP32, MatmulPrecision::BF16}) {
    SCOPED_TRACE(std::string("attention, ") + (precision == MatmulPrecision::BF16 ? "bf16" : "fp32"));
    k->set_matmul_precision(precision);
    Buf Q(*k, qkv), dY(*k, dout_a), out(*k, B * T * NH * HD), lse(*k, B * NH * T);
    k->attention_forward(out.get(), lse.get(), Q.get(), B, T, NH, KVH, HD);
    const auto run = [&](bool overwrite) {
      Buf dQ(*k, VecF(size_t(B * T * RS), overwrite ? nan : 0.0f));
      if (overwrite)
        k->attention_backward_overwrite(dQ.get(), dY.get(), Q.get(), out.get(), lse.get(), B, T, NH, KVH, HD);
      else
        k->attention_backward(dQ.get(), dY.get(), Q.get(), out.get(), lse.get(), B, T, NH, KVH, HD);
      return dQ.host();
    };
    EXPECT_TRUE(same_values(run(true), run(false)));
  }
  k->set_matmul_precision(MatmulPrecision::FP32);
}

TRIDENT_INSTANTIATE_KERNEL_SUITE(LayersTest);

}  // namespace
}  // namespace trident::kt
