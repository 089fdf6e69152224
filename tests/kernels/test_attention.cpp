// Causal self-attention: forward against a double reference, backward against finite differences,
// accumulation, determinism, large logits, workspace growth.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.hpp"

namespace trident::kt {
namespace {

class AttentionTest : public ::testing::Test {
 protected:
  std::unique_ptr<Kernels> k = make_kokkos_kernels();

  struct Result {
    VecF out, att;
  };
  Result forward(const VecF& qkv, int64_t B, int64_t T, int64_t NH, int64_t HD) {
    const int64_t C = NH * HD;
    Buf Q(*k, qkv), out(*k, B * T * C), att(*k, B * NH * T * T);
    k->fill(att.get(), 7.0f, B * NH * T * T);  // the forward must overwrite the upper triangle too
    k->attention_forward(out.get(), att.get(), Q.get(), B, T, NH, HD);
    return {out.host(), att.host()};
  }
  void expect_matches_reference(const VecF& qkv, int64_t B, int64_t T, int64_t NH, int64_t HD, double tol) {
    const Result r = forward(qkv, B, T, NH, HD);
    VecD att_ref;
    const VecD out_ref = ref_attention(to_double(qkv), B, T, NH, HD, &att_ref);
    EXPECT_TRUE(close(r.out, out_ref, tol, tol));
    EXPECT_TRUE(close(r.att, att_ref, tol, tol));
    for (int64_t row = 0; row < B * NH * T; ++row) {
      const int64_t t = row % T;
      double s = 0.0;
      for (int64_t j = 0; j < T; ++j) {
        const float a = r.att[row * T + j];
        if (j > t) {
          ASSERT_EQ(a, 0.0f) << "above the diagonal, row " << row << " col " << j;
        }
        s += a;
      }
      EXPECT_NEAR(s, 1.0, 1e-6) << "row " << row;
    }
  }
};

TEST_F(AttentionTest, ForwardMatchesReference) {
  // Dot products of HD = 4 terms, softmax over <= 5, outputs of <= 5 terms: float error ~1e-6.
  const int64_t B = 2, T = 5, NH = 2, HD = 4;
  expect_matches_reference(random_vec(B * T * 3 * NH * HD, 70, -2.0f, 2.0f), B, T, NH, HD, 1e-5);
}

TEST_F(AttentionTest, ForwardMatchesReferenceAtGpt2HeadSize) {
  // HD = 64: dot products of 64 terms (error <= 64 * 6e-8 * 64 / 8 ~ 3e-5 after scaling) before the
  // softmax, which is 1-Lipschitz in the logits: 5e-5 bounds it.
  const int64_t B = 1, T = 24, NH = 3, HD = 64;
  expect_matches_reference(random_vec(B * T * 3 * NH * HD, 71), B, T, NH, HD, 5e-5);
}

TEST_F(AttentionTest, LargeLogitsAreStable) {
  // Integer q, k in [-100, 100] with HD = 4: logits = q.k / 2 reach ~1e4 and are exact in float,
  // so the kernel and the double reference see identical logits; exp(1e4) overflows without the
  // row-max subtraction (NaN/inf would fail every comparison below).
  const int64_t B = 1, T = 6, NH = 2, HD = 4, C = NH * HD;
  VecF qkv = random_vec(B * T * 3 * C, 72);
  std::mt19937 gen(73);
  std::uniform_int_distribution<int> d(-100, 100);
  for (int64_t bt = 0; bt < B * T; ++bt)
    for (int64_t e = 0; e < 2 * C; ++e) qkv[bt * 3 * C + e] = float(d(gen));
  expect_matches_reference(qkv, B, T, NH, HD, 1e-6);
}

TEST_F(AttentionTest, BackwardMatchesFiniteDifferences) {
  const int64_t B = 2, T = 5, NH = 2, HD = 3, C = NH * HD;
  const VecF qkv = random_vec(B * T * 3 * C, 74, -1.5f, 1.5f), R = random_vec(B * T * C, 75);
  const VecD fd = fd_gradient([&](const VecD& v) { return dot(ref_attention(v, B, T, NH, HD), R); },
                              to_double(qkv));
  Buf Q(*k, qkv), out(*k, B * T * C), att(*k, B * NH * T * T), dout(*k, R), dQ(*k, B * T * 3 * C);
  k->attention_forward(out.get(), att.get(), Q.get(), B, T, NH, HD);
  k->attention_backward(dQ.get(), dout.get(), Q.get(), att.get(), B, T, NH, HD);
  // A chain of float GEMMs of <= 5 terms and a softmax backward in double: error ~1e-6.
  const VecF g = dQ.host();
  EXPECT_TRUE(close(g, fd, 1e-5, 1e-4));
  // The gradient must reach q, k and v (all three thirds non-trivial).
  for (int part = 0; part < 3; ++part) {
    double m = 0.0;
    for (int64_t bt = 0; bt < B * T; ++bt)
      for (int64_t e = 0; e < C; ++e) m = std::max(m, std::fabs(double(g[bt * 3 * C + part * C + e])));
    EXPECT_GT(m, 1e-2) << "part " << part;
  }
}

TEST_F(AttentionTest, BackwardAccumulatesAndIsDeterministic) {
  const int64_t B = 2, T = 7, NH = 3, HD = 8, C = NH * HD;
  const VecF qkv = random_vec(B * T * 3 * C, 76), R = random_vec(B * T * C, 77);
  Buf Q(*k, qkv), out(*k, B * T * C), att(*k, B * NH * T * T), dout(*k, R);
  k->attention_forward(out.get(), att.get(), Q.get(), B, T, NH, HD);
  const VecF out1 = out.host(), att1 = att.host();
  k->attention_forward(out.get(), att.get(), Q.get(), B, T, NH, HD);
  EXPECT_TRUE(same_bits(out.host(), out1));
  EXPECT_TRUE(same_bits(att.host(), att1));

  Buf dQ(*k, B * T * 3 * C), dQ2(*k, B * T * 3 * C);
  k->attention_backward(dQ.get(), dout.get(), Q.get(), att.get(), B, T, NH, HD);
  const VecF g = dQ.host();
  k->attention_backward(dQ2.get(), dout.get(), Q.get(), att.get(), B, T, NH, HD);
  EXPECT_TRUE(same_bits(dQ2.host(), g));
  // Each call adds the same (deterministic) values, so a second call doubles exactly.
  k->attention_backward(dQ.get(), dout.get(), Q.get(), att.get(), B, T, NH, HD);
  EXPECT_TRUE(same_bits(dQ.host(), to_float(scaled(g, 2.0))));
}

TEST_F(AttentionTest, WorkspaceGrowsAndShrinkingShapesStillWork) {
  const int64_t NH = 2, HD = 4;
  const VecF small = random_vec(1 * 3 * 3 * NH * HD, 78), big = random_vec(3 * 9 * 3 * NH * HD, 79);
  const Result a = forward(small, 1, 3, NH, HD);
  expect_matches_reference(big, 3, 9, NH, HD, 1e-5);
  const Result b = forward(small, 1, 3, NH, HD);
  EXPECT_TRUE(same_bits(a.out, b.out));
  EXPECT_TRUE(same_bits(a.att, b.att));
}

}  // namespace
}  // namespace trident::kt
