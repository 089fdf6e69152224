// The Llama-family kernels (#27): LayerNorm's epsilon, RMSNorm, grouped-query attention, RoPE (and
// rope_table), SwiGLU. Every expected value comes from a naive double-precision computation written
// here, from the formulas of kernels.hpp (never from a kernel's own output); each backward reference
// is itself checked against central finite differences of its forward (kernel_test_util.hpp's method)
// on a small case before it is used on larger ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>

#include "core/error.hpp"
#include "kernel_test_util.hpp"

namespace trident::kt {
namespace {

class LlamaOpsTest : public KernelTest {};

// got equals before bit for bit at every index where inside(index) is false.
::testing::AssertionResult untouched_outside(const VecF& got, const VecF& before,
                                             const std::function<bool(int64_t)>& inside) {
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!inside(int64_t(i)) && std::memcmp(&got[i], &before[i], sizeof(float)) != 0) ++bad;
  if (bad) return ::testing::AssertionFailure() << bad << " elements outside the rotated range changed";
  return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------- LayerNorm's epsilon

// LayerNorm with eps, naive: out = (x - mean) / sqrt(var + eps) * w + b.
VecD naive_layernorm(const VecD& x, const VecD& w, const VecD& b, int64_t N, int64_t C, double eps, VecD* rstd) {
  VecD out(x.size());
  rstd->assign(N, 0.0);
  for (int64_t i = 0; i < N; ++i) {
    double m = 0.0, v = 0.0;
    for (int64_t c = 0; c < C; ++c) m += x[i * C + c];
    m /= double(C);
    for (int64_t c = 0; c < C; ++c) v += (x[i * C + c] - m) * (x[i * C + c] - m);
    v /= double(C);
    (*rstd)[i] = 1.0 / std::sqrt(v + eps);
    for (int64_t c = 0; c < C; ++c) out[i * C + c] = (x[i * C + c] - m) * (*rstd)[i] * w[c] + b[c];
  }
  return out;
}

TEST_P(LlamaOpsTest, LayerNormUsesTheGivenEpsilon) {
  // Inputs of variance ~3e-3: eps 0.01 changes rstd by a factor ~2 (1e-5 would be 0.2%), so a kernel
  // that ignored eps fails by far. Statistics in double, outputs rounded once or twice: a few ulp.
  const int64_t N = 5, C = 37;
  const VecF x = random_vec(N * C, 300, -0.1f, 0.1f), w = random_vec(C, 301, 0.5f, 1.5f), b = random_vec(C, 302);
  for (const float eps : {0.01f, 1e-6f}) {
    Buf X(*k, x), W(*k, w), Bb(*k, b), out(*k, N * C), mean(*k, N), rstd(*k, N);
    k->layernorm_forward(out.get(), mean.get(), rstd.get(), X.get(), W.get(), Bb.get(), N, C, eps);
    VecD rs;
    const VecD ref = naive_layernorm(to_double(x), to_double(w), to_double(b), N, C, double(eps), &rs);
    EXPECT_TRUE(close(out.host(), ref, 1e-6, 1e-6)) << "eps " << eps;
    EXPECT_TRUE(close(rstd.host(), rs, 0, 1e-6)) << "eps " << eps;
  }
}

// ---------------------------------------------------------------- RMSNorm

// out = x / sqrt(mean(x^2) + eps) * w, naive in double.
VecD naive_rmsnorm(const VecD& x, const VecD& w, int64_t N, int64_t C, double eps, VecD* rstd = nullptr) {
  VecD out(x.size());
  if (rstd) rstd->assign(N, 0.0);
  for (int64_t i = 0; i < N; ++i) {
    double ss = 0.0;
    for (int64_t c = 0; c < C; ++c) ss += x[i * C + c] * x[i * C + c];
    const double rs = 1.0 / std::sqrt(ss / double(C) + eps);
    for (int64_t c = 0; c < C; ++c) out[i * C + c] = x[i * C + c] * rs * w[c];
    if (rstd) (*rstd)[i] = rs;
  }
  return out;
}

// The analytic gradients of sum(naive_rmsnorm * dy): dx = rs (w dy) - x rs^3 mean(w dy x), dw = sum x rs dy.
void naive_rmsnorm_backward(const VecD& x, const VecD& w, const VecF& dy, int64_t N, int64_t C, double eps, VecD* dx,
                            VecD* dw) {
  VecD rs;
  naive_rmsnorm(x, w, N, C, eps, &rs);
  dx->assign(x.size(), 0.0);
  dw->assign(C, 0.0);
  for (int64_t i = 0; i < N; ++i) {
    double a = 0.0;
    for (int64_t c = 0; c < C; ++c) a += w[c] * double(dy[i * C + c]) * x[i * C + c];
    a /= double(C);
    for (int64_t c = 0; c < C; ++c) {
      (*dx)[i * C + c] = rs[i] * w[c] * double(dy[i * C + c]) - x[i * C + c] * rs[i] * rs[i] * rs[i] * a;
      (*dw)[c] += x[i * C + c] * rs[i] * double(dy[i * C + c]);
    }
  }
}

TEST_P(LlamaOpsTest, RmsNormForwardMatchesReference) {
  // Odd C (37: no lane or vector multiple) and 384; eps 1e-3 (Llama uses 1e-5 or 1e-6; any value must be
  // honoured). The last row is scaled by 0.01 so that mean(x^2) ~ 3e-5 and eps dominates rstd.
  for (const int64_t C : {37, 384}) {
    const int64_t N = 6;
    const float eps = 1e-3f;
    VecF x = random_vec(N * C, 310 + uint32_t(C), -2.0f, 2.0f);
    for (int64_t c = 0; c < C; ++c) x[(N - 1) * C + c] *= 0.01f;
    const VecF w = random_vec(C, 311, 0.5f, 1.5f);
    Buf X(*k, x), W(*k, w), out(*k, N * C), rstd(*k, N);
    k->fill(out.get(), 7.0f, N * C);  // overwritten, not accumulated
    k->rmsnorm_forward(out.get(), rstd.get(), X.get(), W.get(), N, C, eps);
    VecD rs;
    const VecD ref = naive_rmsnorm(to_double(x), to_double(w), N, C, double(eps), &rs);
    // Statistics in double; x rstd rounded to float, times w rounded: 2 ulp.
    EXPECT_TRUE(close(out.host(), ref, 1e-6, 1e-6)) << "C " << C;
    EXPECT_TRUE(close(rstd.host(), rs, 0, 1e-6)) << "C " << C;
  }
}

TEST_P(LlamaOpsTest, RmsNormBackwardMatchesReferenceAndAccumulates) {
  // The analytic reference against finite differences first (small case), then the kernel against it
  // at C 37 and 384, accumulating onto non-zero gradients G0: want G0 + g. The kernel works from the
  // saved float rstd (6e-8 relative) and rounds double results to float; the final += adds one rounding
  // of |G0| + |g| <= ~10: 1e-5 absolute and relative bounds all of it.
  {
    const int64_t N = 3, C = 7;
    const double eps = 1e-3;
    const VecD x = to_double(random_vec(N * C, 320, -2.0f, 2.0f)), w = to_double(random_vec(C, 321, 0.5f, 1.5f));
    const VecF R = random_vec(N * C, 322);
    VecD dx, dw;
    naive_rmsnorm_backward(x, w, R, N, C, eps, &dx, &dw);
    EXPECT_TRUE(close(to_float(dx), fd_gradient([&](const VecD& v) { return dot(naive_rmsnorm(v, w, N, C, eps), R); },
                                                x),
                      1e-7, 1e-6));
    EXPECT_TRUE(close(to_float(dw), fd_gradient([&](const VecD& v) { return dot(naive_rmsnorm(x, v, N, C, eps), R); },
                                                w),
                      1e-7, 1e-6));
  }
  for (const int64_t C : {37, 384}) {
    const int64_t N = 6;
    const float eps = 1e-4f;
    const VecF x = random_vec(N * C, 330 + uint32_t(C), -2.0f, 2.0f), w = random_vec(C, 331, 0.5f, 1.5f);
    const VecF R = random_vec(N * C, 332), gx0 = random_vec(N * C, 333), gw0 = random_vec(C, 334);
    VecD dx, dw;
    naive_rmsnorm_backward(to_double(x), to_double(w), R, N, C, double(eps), &dx, &dw);
    for (size_t i = 0; i < dx.size(); ++i) dx[i] += gx0[i];
    for (size_t i = 0; i < dw.size(); ++i) dw[i] += gw0[i];

    Buf X(*k, x), W(*k, w), out(*k, N * C), rstd(*k, N), dout(*k, R), dX(*k, gx0), dW(*k, gw0);
    k->rmsnorm_forward(out.get(), rstd.get(), X.get(), W.get(), N, C, eps);
    k->rmsnorm_backward(dX.get(), dW.get(), dout.get(), X.get(), W.get(), rstd.get(), N, C);
    const VecF gx = dX.host(), gw = dW.host();
    EXPECT_TRUE(close(gx, dx, 1e-5, 1e-5)) << "dinp, C " << C;
    EXPECT_TRUE(close(gw, dw, 1e-5, 1e-5)) << "dweight, C " << C;
    // Deterministic: a rerun from the same start gives the same bits.
    Buf dX2(*k, gx0), dW2(*k, gw0);
    k->rmsnorm_backward(dX2.get(), dW2.get(), dout.get(), X.get(), W.get(), rstd.get(), N, C);
    EXPECT_TRUE(same_bits(dX2.host(), gx)) << "C " << C;
    EXPECT_TRUE(same_bits(dW2.host(), gw)) << "C " << C;
  }
}

// ---------------------------------------------------------------- grouped-query attention

// Naive grouped-query causal attention, per head and position, from kernels.hpp's layout: a row of qkv
// holds q [NH,HD] | k [KVH,HD] | v [KVH,HD]; query head h uses key/value head h / (NH / KVH).
struct Gqa {
  int64_t B, T, NH, KVH, HD;
  int64_t row() const { return (NH + 2 * KVH) * HD; }
  int64_t q(int64_t b, int64_t t, int64_t h) const { return (b * T + t) * row() + h * HD; }
  int64_t k(int64_t b, int64_t t, int64_t h) const { return (b * T + t) * row() + (NH + h / (NH / KVH)) * HD; }
  int64_t v(int64_t b, int64_t t, int64_t h) const { return k(b, t, h) + KVH * HD; }
  int64_t o(int64_t b, int64_t t, int64_t h) const { return (b * T + t) * NH * HD + h * HD; }

  VecD forward(const VecD& qkv, VecD* lse_out = nullptr) const {
    VecD out(size_t(B * T * NH * HD), 0.0), lse(size_t(B * NH * T), 0.0);
    const double scale = 1.0 / std::sqrt(double(HD));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < NH; ++h)
        for (int64_t t = 0; t < T; ++t) {
          VecD s(size_t(t + 1));
          double m = -INFINITY;
          for (int64_t j = 0; j <= t; ++j) {
            double d = 0.0;
            for (int64_t e = 0; e < HD; ++e) d += qkv[q(b, t, h) + e] * qkv[k(b, j, h) + e];
            s[j] = d * scale;
            m = std::max(m, s[j]);
          }
          double z = 0.0;
          for (int64_t j = 0; j <= t; ++j) z += std::exp(s[j] - m);
          lse[(b * NH + h) * T + t] = m + std::log(z);
          for (int64_t j = 0; j <= t; ++j)
            for (int64_t e = 0; e < HD; ++e) out[o(b, t, h) + e] += std::exp(s[j] - m) / z * qkv[v(b, j, h) + e];
        }
    if (lse_out) *lse_out = lse;
    return out;
  }

  // The analytic gradient of sum(forward(qkv) * dout) w.r.t. qkv.
  VecD backward(const VecD& qkv, const VecF& dout) const {
    VecD lse, g(qkv.size(), 0.0);
    const VecD out = forward(qkv, &lse);
    const double scale = 1.0 / std::sqrt(double(HD));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < NH; ++h)
        for (int64_t t = 0; t < T; ++t) {
          double D = 0.0;
          for (int64_t e = 0; e < HD; ++e) D += double(dout[o(b, t, h) + e]) * out[o(b, t, h) + e];
          for (int64_t j = 0; j <= t; ++j) {
            double s = 0.0, dp = 0.0;
            for (int64_t e = 0; e < HD; ++e) {
              s += qkv[q(b, t, h) + e] * qkv[k(b, j, h) + e];
              dp += double(dout[o(b, t, h) + e]) * qkv[v(b, j, h) + e];
            }
            const double p = std::exp(s * scale - lse[(b * NH + h) * T + t]), ds = p * (dp - D) * scale;
            for (int64_t e = 0; e < HD; ++e) {
              g[q(b, t, h) + e] += ds * qkv[k(b, j, h) + e];
              g[k(b, j, h) + e] += ds * qkv[q(b, t, h) + e];
              g[v(b, j, h) + e] += p * double(dout[o(b, t, h) + e]);
            }
          }
        }
    return g;
  }
};

TEST_P(LlamaOpsTest, GqaReferenceBackwardMatchesFiniteDifferences) {
  for (const auto& [NH, KVH] : {std::pair<int64_t, int64_t>{4, 2}, {3, 1}}) {
    const Gqa a{2, 5, NH, KVH, 3};
    const VecF qkv = random_vec(a.B * a.T * a.row(), 340, -1.5f, 1.5f), R = random_vec(a.B * a.T * NH * a.HD, 341);
    const VecD fd = fd_gradient([&](const VecD& v) { return dot(a.forward(v), R); }, to_double(qkv));
    EXPECT_TRUE(close(to_float(a.backward(to_double(qkv), R)), fd, 1e-7, 1e-6)) << NH << "/" << KVH;
  }
}

TEST_P(LlamaOpsTest, GqaForwardRowsAndBackwardMatchReference) {
  // HD 24 (not a power of two, not a multiple of the CUDA lane segments); T 130 crosses the CPU tile
  // edge (128) and several CUDA tiles. Tolerances as test_attention.cpp derives them, at HD 24: logit
  // error ~eps HD^1.5 / 4 = 1.8e-6; out: 2 x that + T eps (7.8e-6) -> 3e-5; lse: the logit error + 5e-7
  // -> 5e-6. Backward: the query-head gradients as in test_attention (2e-5 at HD 8, here 3x the logit
  // error); a key/value head's dk and dv sum NH/KVH query heads' terms (up to 6x the magnitude and the
  // rounding): 1e-4 absolute, 1e-4 relative.
  for (const auto& [NH, KVH] : {std::pair<int64_t, int64_t>{6, 6}, {6, 2}, {6, 1}, {4, 2}}) {
    SCOPED_TRACE("NH " + std::to_string(NH) + " KVH " + std::to_string(KVH));
    const Gqa a{2, 130, NH, KVH, 24};
    const int64_t n_qkv = a.B * a.T * a.row(), n_out = a.B * a.T * NH * a.HD;
    const VecF qkv = random_vec(n_qkv, 350 + uint32_t(NH * 10 + KVH)), R = random_vec(n_out, 351);
    VecD lse_ref;
    const VecD out_ref = a.forward(to_double(qkv), &lse_ref);

    Buf Q(*k, qkv), out(*k, n_out), lse(*k, a.B * NH * a.T), dout(*k, R);
    k->fill(out.get(), 7.0f, n_out);
    k->attention_forward(out.get(), lse.get(), Q.get(), a.B, a.T, NH, KVH, a.HD);
    const VecF out1 = out.host(), lse1 = lse.host();
    EXPECT_TRUE(close(out1, out_ref, 3e-5, 3e-5)) << "out";
    EXPECT_TRUE(close(lse1, lse_ref, 5e-6, 5e-6)) << "lse";

    // Rows: a range across the CPU tile edge, computed with the qkv rows past it poisoned (NaN).
    const int64_t q0 = 120, nq = 10;
    VecF cache = qkv;
    for (int64_t b = 0; b < a.B; ++b)
      for (int64_t i = (b * a.T + q0 + nq) * a.row(); i < (b + 1) * a.T * a.row(); ++i) cache[i] = std::nanf("");
    Buf Qc(*k, cache), rows(*k, a.B * nq * NH * a.HD);
    k->attention_forward_rows(rows.get(), Qc.get(), a.B, a.T, NH, KVH, a.HD, q0, nq);
    VecD rows_ref(size_t(a.B * nq * NH * a.HD));
    for (int64_t b = 0; b < a.B; ++b)
      for (int64_t e = 0; e < nq * NH * a.HD; ++e)
        rows_ref[b * nq * NH * a.HD + e] = out_ref[(b * a.T + q0) * NH * a.HD + e];
    EXPECT_TRUE(close(rows.host(), rows_ref, 3e-5, 3e-5)) << "rows";

    // Backward, accumulated onto G0; determinism of forward and backward.
    const VecF g0 = random_vec(n_qkv, 352);
    VecD want = a.backward(to_double(qkv), R);
    for (size_t i = 0; i < want.size(); ++i) want[i] += g0[i];
    Buf dQ(*k, g0), dQ2(*k, g0);
    k->attention_backward(dQ.get(), dout.get(), Q.get(), out.get(), lse.get(), a.B, a.T, NH, KVH, a.HD);
    const VecF g = dQ.host();
    EXPECT_TRUE(close(g, want, 1e-4, 1e-4)) << "dqkv";
    k->attention_forward(out.get(), lse.get(), Q.get(), a.B, a.T, NH, KVH, a.HD);
    EXPECT_TRUE(same_bits(out.host(), out1));
    EXPECT_TRUE(same_bits(lse.host(), lse1));
    k->attention_backward(dQ2.get(), dout.get(), Q.get(), out.get(), lse.get(), a.B, a.T, NH, KVH, a.HD);
    EXPECT_TRUE(same_bits(dQ2.host(), g)) << "two backward runs differ";
  }
}

TEST_P(LlamaOpsTest, GqaSharesKeyValueHeadsWithoutCopies) {
  // Grouped-query forward equals multi-head attention on a qkv whose K and V heads are copied to every
  // query head of their group (same logits, same values): the kernel reads the shared head in place.
  const int64_t B = 1, T = 40, NH = 6, KVH = 2, HD = 16, G = NH / KVH;
  const Gqa gqa{B, T, NH, KVH, HD};
  const VecF qkv = random_vec(B * T * gqa.row(), 360);
  VecF mha(size_t(B * T * 3 * NH * HD));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t e = 0; e < HD; ++e) {
        mha[t * 3 * NH * HD + h * HD + e] = qkv[gqa.q(0, t, h) + e];
        mha[t * 3 * NH * HD + (NH + h) * HD + e] = qkv[gqa.q(0, t, 0) + (NH + h / G) * HD + e];
        mha[t * 3 * NH * HD + (2 * NH + h) * HD + e] = qkv[gqa.q(0, t, 0) + (NH + KVH + h / G) * HD + e];
      }
  Buf Qg(*k, qkv), Qm(*k, mha), og(*k, B * T * NH * HD), om(*k, B * T * NH * HD), lg(*k, B * NH * T),
      lm(*k, B * NH * T);
  k->attention_forward(og.get(), lg.get(), Qg.get(), B, T, NH, KVH, HD);
  k->attention_forward(om.get(), lm.get(), Qm.get(), B, T, NH, NH, HD);
  EXPECT_TRUE(close(og.host(), to_double(om.host()), 1e-6, 1e-6));
  EXPECT_TRUE(close(lg.host(), to_double(lm.host()), 1e-6, 1e-6));
}

TEST_P(LlamaOpsTest, KeyValueHeadsMustDivideQueryHeads) {
  const int64_t B = 1, T = 4, HD = 4;
  Buf Q(*k, B * T * (6 + 2 * 4) * HD), out(*k, B * T * 6 * HD), lse(*k, B * 6 * T), dQ(*k, B * T * (6 + 2 * 4) * HD);
  for (const int64_t KVH : {4, 0}) {
    EXPECT_THROW(k->attention_forward(out.get(), lse.get(), Q.get(), B, T, 6, KVH, HD), Error) << KVH;
    EXPECT_THROW(k->attention_forward_rows(out.get(), Q.get(), B, T, 6, KVH, HD, 0, T), Error) << KVH;
    EXPECT_THROW(k->attention_backward(dQ.get(), out.get(), Q.get(), out.get(), lse.get(), B, T, 6, KVH, HD), Error)
        << KVH;
  }
  try {
    k->attention_forward(out.get(), lse.get(), Q.get(), B, T, 6, 4, HD);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("6 query heads cannot share 4 key/value heads"), std::string::npos)
        << e.what();
  }
}

// ---------------------------------------------------------------- RoPE

// Angle of position p, pair i: p * theta^(-2i/HD), in double.
double rope_angle(double theta, int64_t HD, int64_t p, int64_t i) {
  return double(p) * std::pow(theta, -2.0 * double(i) / double(HD));
}

TEST_P(LlamaOpsTest, RopeTableMatchesCosineAndSine) {
  // The angles are formed in double and rounded once: every entry is within half an ulp (<= 2^-25 for
  // |value| <= 1, so 6e-8 bounds it) of the double cos / sin. Positions up to 8191 at theta 5e5: a
  // float angle (p * freq rounded to float) would be off by up to ~2.4e-4 there.
  for (const auto& [theta, HD, P] : {std::tuple<double, int64_t, int64_t>{10000.0, 64, 300}, {500000.0, 128, 8192},
                                     {10000.0, 10, 17}}) {
    const std::vector<float> table = rope_table(theta, HD, P);
    ASSERT_EQ(int64_t(table.size()), P * HD);
    double worst = 0.0;
    for (int64_t p = 0; p < P; ++p)
      for (int64_t i = 0; i < HD / 2; ++i) {
        const double a = rope_angle(theta, HD, p, i);
        worst = std::max(worst, std::fabs(double(table[(p * HD / 2 + i) * 2]) - std::cos(a)));
        worst = std::max(worst, std::fabs(double(table[(p * HD / 2 + i) * 2 + 1]) - std::sin(a)));
      }
    EXPECT_LE(worst, 6e-8) << "theta " << theta << " HD " << HD;
    EXPECT_EQ(table[0], 1.0f);  // position 0: cos 0, sin 0
    EXPECT_EQ(table[1], 0.0f);
  }
  EXPECT_THROW(rope_table(10000.0, 7, 4), Error);
}

// The rotation of kernels.hpp, in double with exact cos / sin (sign -1: the transpose).
VecD naive_rope(const VecF& x, double theta, int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HD, int64_t t0,
                int64_t nt, double sign) {
  VecD y = to_double(x);
  const int64_t row = (NH + 2 * KVH) * HD, half = HD / 2;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = t0; t < t0 + nt; ++t)
      for (int64_t h = 0; h < NH + KVH; ++h)
        for (int64_t i = 0; i < half; ++i) {
          const int64_t at = (b * T + t) * row + h * HD + i;
          const double a = rope_angle(theta, HD, t, i), c = std::cos(a), s = sign * std::sin(a);
          y[at] = double(x[at]) * c - double(x[at + half]) * s;
          y[at + half] = double(x[at + half]) * c + double(x[at]) * s;
        }
  return y;
}

TEST_P(LlamaOpsTest, RopeRotatesQAndKOfTheRowRangeOnly) {
  // HD 10 (5 pairs: odd) and 24; grouped-query heads. Only rows [t0, t0 + nt) of each sequence and only
  // their q and k heads change (bitwise elsewhere, v included). Values: two float products and a sum
  // of |x| <= 1 with the table's rounding (6e-8): 3e-7 bounds them.
  const double theta = 10000.0;
  for (const auto& [HD, t0, nt] : {std::tuple<int64_t, int64_t, int64_t>{10, 3, 9}, {24, 0, 20}, {24, 19, 1}}) {
    SCOPED_TRACE("HD " + std::to_string(HD) + " rows [" + std::to_string(t0) + ", " + std::to_string(t0 + nt) + ")");
    const int64_t B = 2, T = 20, NH = 4, KVH = 2, row = (NH + 2 * KVH) * HD, n = B * T * row;
    const VecF x = random_vec(n, 370 + uint32_t(HD)), gin = random_vec(n, 371);
    const std::vector<float> table = rope_table(theta, HD, T);
    Buf tab(*k, table), X(*k, x), Gb(*k, gin);
    k->rope_forward(X.get(), tab.get(), B, T, NH, KVH, HD, t0, nt);
    k->rope_backward(Gb.get(), tab.get(), B, T, NH, KVH, HD, t0, nt);
    const VecF y = X.host(), g = Gb.host();
    auto rotated = [&, t0 = t0, nt = nt, HD = HD](int64_t i) {
      const int64_t t = (i / row) % T, col = i % row;
      return t >= t0 && t < t0 + nt && col < (NH + KVH) * HD;
    };
    EXPECT_TRUE(close(y, naive_rope(x, theta, B, T, NH, KVH, HD, t0, nt, 1.0), 3e-7, 0)) << "forward";
    EXPECT_TRUE(close(g, naive_rope(gin, theta, B, T, NH, KVH, HD, t0, nt, -1.0), 3e-7, 0)) << "backward";
    EXPECT_TRUE(untouched_outside(y, x, rotated)) << "forward";
    EXPECT_TRUE(untouched_outside(g, gin, rotated)) << "backward";

    // Backward is the transpose: <R x, g> = <x, R^T g> (sums of n float-rounded products, in double).
    double lhs = 0.0, rhs = 0.0, mag = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      lhs += double(y[i]) * double(gin[i]);
      rhs += double(x[i]) * double(g[i]);
      mag += std::fabs(double(x[i]) * double(gin[i]));
    }
    EXPECT_NEAR(lhs, rhs, 1e-6 * mag) << "<R x, g> vs <x, R^T g>";
    // And R^T R = 1: rotating back restores x to a few ulp.
    k->rope_backward(X.get(), tab.get(), B, T, NH, KVH, HD, t0, nt);
    EXPECT_TRUE(close(X.host(), to_double(x), 3e-7, 0)) << "round trip";
  }
}

TEST_P(LlamaOpsTest, RopeRefusesBadShapes) {
  const int64_t B = 1, T = 4, HD = 8;
  const std::vector<float> table = rope_table(10000.0, HD, T);
  Buf tab(*k, table), X(*k, B * T * (4 + 2 * 2) * HD);
  EXPECT_THROW(k->rope_forward(X.get(), tab.get(), B, T, 4, 3, HD, 0, T), Error);     // KVH does not divide NH
  EXPECT_THROW(k->rope_forward(X.get(), tab.get(), B, T, 4, 2, HD, 2, 3), Error);     // rows past T
  EXPECT_THROW(k->rope_backward(X.get(), tab.get(), B, T, 4, 2, HD - 1, 0, 1), Error);  // odd head size
}

// ---------------------------------------------------------------- SwiGLU

double naive_silu(double g) { return g / (1.0 + std::exp(-g)); }

VecD naive_swiglu(const VecD& x, int64_t N, int64_t F) {
  VecD out(size_t(N * F));
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < F; ++j) out[i * F + j] = naive_silu(x[i * 2 * F + j]) * x[i * 2 * F + F + j];
  return out;
}

TEST_P(LlamaOpsTest, SwigluForwardAndBackwardMatchReference) {
  const int64_t N = 7, F = 33;
  VecF x = random_vec(N * 2 * F, 380, -6.0f, 6.0f);
  // Extremes: at gate -100, exp(100) = 2.7e43 overflows float: sigmoid 0, silu -0 (the double value
  // -3.7e-42 is within any tolerance), and no NaN in the gradient; gate 100 (silu = 100) and 0.
  x[0] = -100.0f;
  x[1] = 100.0f;
  x[2] = 0.0f;
  const VecF R = random_vec(N * F, 381), g0 = random_vec(N * 2 * F, 382);
  Buf X(*k, x), out(*k, N * F), dout(*k, R), dX(*k, g0);
  k->fill(out.get(), 7.0f, N * F);
  k->swiglu_forward(out.get(), X.get(), N, F);
  // A float exp (1 ulp), a division and a product: a few ulp of |out| <= 36.
  EXPECT_TRUE(close(out.host(), naive_swiglu(to_double(x), N, F), 1e-6, 1e-6));

  // The reference gradient: FD of the double forward (exact to ~1e-8 here).
  const VecD fd = fd_gradient([&](const VecD& v) { return dot(naive_swiglu(v, N, F), R); }, to_double(x));
  VecD want(fd.size());
  for (size_t i = 0; i < fd.size(); ++i) want[i] = fd[i] + double(g0[i]);
  k->swiglu_backward(dX.get(), X.get(), dout.get(), N, F);
  const VecF g = dX.host();
  // Closed-form float derivative (|d| <= ~7) plus the accumulation's rounding: 1e-5.
  EXPECT_TRUE(close(g, want, 1e-5, 1e-5));
  Buf dX2(*k, g0);
  k->swiglu_backward(dX2.get(), X.get(), dout.get(), N, F);
  EXPECT_TRUE(same_bits(dX2.host(), g));
}

TRIDENT_INSTANTIATE_KERNEL_SUITE(LlamaOpsTest);

}  // namespace
}  // namespace trident::kt
