// Causal self-attention on the flash-style contract (out + lse forward, backward from out and lse):
// forward out and lse against a double reference at HD 4..64, across tile edges (T up to 1024),
// T = 1, large logits; backward against finite differences of the double reference forward, and
// against the double analytic backward (itself checked against finite differences) on long T;
// accumulation, determinism, workspace reuse.
//
// Tolerances. Both backends round the logits s = q.k / sqrt(HD) to float after an HD-term dot
// product: error <= HD eps sum|q_e k_e| / sqrt(HD), and sum|q_e k_e| ~ HD/4 for uniform(-1,1) data, so
// ~eps HD^1.5 / 4 (eps = 6e-8): 1.2e-7 at HD 4, 3.4e-7 at 8, 2.7e-6 at 32, 7.7e-6 at 64. A logit
// error moves p_j by p_j (ds_j - sum p ds), so sum|dp| <= 2 max|ds|, and out = sum p v (|v| <= 1) by
// as much, plus its own float sum of <= T products (worst case T eps relative to sum|p v| <= 1; the
// tiles' rescaling adds two roundings per key tile). lse = m + log l moves by max|ds| plus its own
// float rounding (|lse| < 10: 5e-7). Each bound is applied where it is used.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.hpp"
#include "kernel_test_util.hpp"

namespace trident::kt {
namespace {

class AttentionTest : public KernelTest {
 protected:
  struct Result {
    VecF out, lse;
  };
  Result forward(const VecF& qkv, int64_t B, int64_t T, int64_t NH, int64_t HD) {
    const int64_t C = NH * HD;
    Buf Q(*k, qkv), out(*k, B * T * C), lse(*k, B * NH * T);
    k->fill(out.get(), 7.0f, B * T * C);  // the forward overwrites (no accumulation into out or lse)
    k->fill(lse.get(), 7.0f, B * NH * T);
    k->attention_forward(out.get(), lse.get(), Q.get(), B, T, NH, NH, HD);
    return {out.host(), lse.host()};
  }
  // out within out_tol (absolute and relative), lse within lse_tol against the double reference.
  void expect_matches_reference(const VecF& qkv, int64_t B, int64_t T, int64_t NH, int64_t HD, double out_tol,
                                double lse_tol) {
    const Result r = forward(qkv, B, T, NH, HD);
    VecD lse_ref;
    const VecD out_ref = ref_attention(to_double(qkv), B, T, NH, HD, &lse_ref);
    EXPECT_TRUE(close(r.out, out_ref, out_tol, out_tol)) << "out, T " << T << " HD " << HD;
    EXPECT_TRUE(close(r.lse, lse_ref, lse_tol, lse_tol)) << "lse, T " << T << " HD " << HD;
  }
  // The kernel's gradient of L = sum(out * R) w.r.t. qkv, accumulated into a zeroed buffer.
  VecF backward(const VecF& qkv, const VecF& R, int64_t B, int64_t T, int64_t NH, int64_t HD) {
    const int64_t C = NH * HD;
    Buf Q(*k, qkv), out(*k, B * T * C), lse(*k, B * NH * T), dout(*k, R), dQ(*k, B * T * 3 * C);
    k->attention_forward(out.get(), lse.get(), Q.get(), B, T, NH, NH, HD);
    k->attention_backward(dQ.get(), dout.get(), Q.get(), out.get(), lse.get(), B, T, NH, NH, HD);
    return dQ.host();
  }
  // max |g| over the q, k or v third (part 0, 1, 2) of a [B*T, 3C] gradient.
  static double part_max(const VecF& g, int64_t rows, int64_t C, int part) {
    double m = 0.0;
    for (int64_t bt = 0; bt < rows; ++bt)
      for (int64_t e = 0; e < C; ++e) m = std::max(m, std::fabs(double(g[bt * 3 * C + part * C + e])));
    return m;
  }
};

TEST_P(AttentionTest, ForwardMatchesReferenceAtEveryHeadSize) {
  // Out: 2 x the logit error + 13 eps (8e-7): 1.5e-6 at HD <= 8, 6e-6 at 32, 1.6e-5 at 64, bounded by
  // 1e-5, 2e-5, 5e-5; lse: the logit error + 5e-7, within the same bounds.
  const int64_t B = 2, T = 13, NH = 2;
  for (const auto& [HD, tol] : {std::pair<int64_t, double>{4, 1e-5}, {8, 1e-5}, {32, 2e-5}, {64, 5e-5}})
    expect_matches_reference(random_vec(B * T * 3 * NH * HD, 70 + uint32_t(HD)), B, T, NH, HD, tol, tol);
}

TEST_P(AttentionTest, ForwardAcrossTileEdgesAndLongSequences) {
  // T around the CPU tile (128): one full tile, one row into the next, three tiles with a partial
  // last one, and the GPT-2 context 1024 (8 tiles, 36 tile pairs per head). HD 8: logit error 3.4e-7;
  // out: 2 x that + T eps worst case (1.9e-5 at T 300, 6.2e-5 at T 1024; the blocked float sums of
  // both backends stay far below it): 2e-5 and 1e-4; lse: logit error + 5e-7 rounding: 2e-6.
  const int64_t HD = 8;
  for (const int64_t T : {128, 129, 300}) {
    const int64_t B = 2, NH = 2;
    expect_matches_reference(random_vec(B * T * 3 * NH * HD, 80 + uint32_t(T)), B, T, NH, HD, 2e-5, 2e-6);
  }
  expect_matches_reference(random_vec(1024 * 3 * 1 * HD, 81), 1, 1024, 1, HD, 1e-4, 2e-6);
}

TEST_P(AttentionTest, SingleTokenAttendsOnlyToItself) {
  // T = 1: p = 1, so out = v and lse = q.k / sqrt(HD); the softmax gradient vanishes (dq = dk = 0:
  // dS = p (dP - D) with dP = D = dout.v up to float rounding of the two dot products), dv = dout.
  const int64_t B = 3, T = 1, NH = 2, HD = 8, C = NH * HD;
  const VecF qkv = random_vec(B * T * 3 * C, 90), R = random_vec(B * T * C, 91);
  const Result r = forward(qkv, B, T, NH, HD);
  VecD lse_ref;
  ref_attention(to_double(qkv), B, T, NH, HD, &lse_ref);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t e = 0; e < C; ++e) EXPECT_NEAR(r.out[b * C + e], qkv[b * 3 * C + 2 * C + e], 1e-7) << b << "," << e;
  EXPECT_TRUE(close(r.lse, lse_ref, 1e-6, 1e-6));  // an 8-term float dot product, |.| <= 3
  const VecF g = backward(qkv, R, B, T, NH, HD);
  EXPECT_LE(part_max(g, B * T, C, 0), 1e-6);  // rounding of dP - D (|.| <= 8) times |k| / sqrt(8)
  EXPECT_LE(part_max(g, B * T, C, 1), 1e-6);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t e = 0; e < C; ++e) EXPECT_NEAR(g[b * 3 * C + 2 * C + e], R[b * C + e], 1e-7) << b << "," << e;
}

TEST_P(AttentionTest, LargeLogitsAreStable) {
  // Integer q, k in [-100, 100] with HD = 4: logits = q.k / 2 reach ~1e4 and are exact in float, so
  // kernel and reference see identical logits; exp(1e4) overflows without the row max subtracted
  // (NaN/inf would fail every comparison below). lse ~1e4 is rounded to float once: 1e-7 relative
  // (0.5 ulp = 3e-8, plus log l in double).
  const int64_t B = 1, T = 6, NH = 2, HD = 4, C = NH * HD;
  VecF qkv = random_vec(B * T * 3 * C, 72);
  std::mt19937 gen(73);
  std::uniform_int_distribution<int> d(-100, 100);
  for (int64_t bt = 0; bt < B * T; ++bt)
    for (int64_t e = 0; e < 2 * C; ++e) qkv[bt * 3 * C + e] = float(d(gen));
  const Result r = forward(qkv, B, T, NH, HD);
  VecD lse_ref;
  const VecD out_ref = ref_attention(to_double(qkv), B, T, NH, HD, &lse_ref);
  EXPECT_TRUE(close(r.out, out_ref, 1e-6, 1e-6));  // p is 0/1 or exp of exact differences
  EXPECT_TRUE(close(r.lse, lse_ref, 0, 1e-7));
}

TEST_P(AttentionTest, BackwardMatchesFiniteDifferences) {
  const int64_t B = 2, T = 5, NH = 2, HD = 3, C = NH * HD;
  const VecF qkv = random_vec(B * T * 3 * C, 74, -1.5f, 1.5f), R = random_vec(B * T * C, 75);
  const VecD fd = fd_gradient([&](const VecD& v) { return dot(ref_attention(v, B, T, NH, HD), R); },
                              to_double(qkv));
  // The double analytic reference used on long sequences below agrees with FD (FD error ~1e-8).
  EXPECT_TRUE(close(to_float(ref_attention_backward(to_double(qkv), R, B, T, NH, HD)), fd, 1e-7, 1e-6));
  // A chain of float GEMMs of <= 5 terms, float exp, and the float lse: error ~1e-6.
  const VecF g = backward(qkv, R, B, T, NH, HD);
  EXPECT_TRUE(close(g, fd, 1e-5, 1e-4));
  for (int part = 0; part < 3; ++part) EXPECT_GT(part_max(g, B * T, C, part), 1e-2) << "part " << part;
}

TEST_P(AttentionTest, BackwardAcrossTileEdgesMatchesReference) {
  // Against the double analytic backward (checked against FD above). Gradients are sums of <= T
  // terms p (dP - D) k / sqrt(HD): each term carries the logit error (3.4e-7), exp's 1 ulp and the
  // float lse (5e-7 absolute in the exponent) relatively, then a float sum of <= T terms (T eps worst
  // case relative to the sum of |terms| <= max|dP - D| max|k| ~ 2): 2e-5 absolute bounds it at T 300.
  const int64_t B = 1, NH = 2, HD = 8, C = NH * HD;
  for (const int64_t T : {129, 300}) {
    const VecF qkv = random_vec(B * T * 3 * C, 92 + uint32_t(T)), R = random_vec(B * T * C, 93 + uint32_t(T));
    const VecF g = backward(qkv, R, B, T, NH, HD);
    EXPECT_TRUE(close(g, ref_attention_backward(to_double(qkv), R, B, T, NH, HD), 2e-5, 1e-4)) << "T " << T;
    for (int part = 0; part < 3; ++part) EXPECT_GT(part_max(g, B * T, C, part), 1e-2) << "part " << part;
  }
}

TEST_P(AttentionTest, BackwardAccumulatesAndIsDeterministic) {
  // One tile (T 7) and several with a partial last one (T 300).
  for (const int64_t T : {7, 300}) {
    const int64_t B = 2, NH = 3, HD = 8, C = NH * HD;
    const VecF qkv = random_vec(B * T * 3 * C, 76), R = random_vec(B * T * C, 77);
    Buf Q(*k, qkv), out(*k, B * T * C), lse(*k, B * NH * T), dout(*k, R);
    k->attention_forward(out.get(), lse.get(), Q.get(), B, T, NH, NH, HD);
    const VecF out1 = out.host(), lse1 = lse.host();
    k->attention_forward(out.get(), lse.get(), Q.get(), B, T, NH, NH, HD);
    EXPECT_TRUE(same_bits(out.host(), out1)) << "T " << T;
    EXPECT_TRUE(same_bits(lse.host(), lse1)) << "T " << T;

    Buf dQ(*k, B * T * 3 * C), dQ2(*k, B * T * 3 * C);
    k->attention_backward(dQ.get(), dout.get(), Q.get(), out.get(), lse.get(), B, T, NH, NH, HD);
    const VecF g = dQ.host();
    k->attention_backward(dQ2.get(), dout.get(), Q.get(), out.get(), lse.get(), B, T, NH, NH, HD);
    EXPECT_TRUE(same_bits(dQ2.host(), g)) << "T " << T;
    // From a non-zero start G0 the result is G0 + g: a backend may add its tiles' contributions into
    // dqkv one by one, so each element takes a few extra float roundings (<= 1 ulp of |G0| + |g| <= 2
    // each, one per key tile): 1e-6 absolute.
    const VecF g0 = random_vec(B * T * 3 * C, 78);
    Buf dQ3(*k, g0);
    k->attention_backward(dQ3.get(), dout.get(), Q.get(), out.get(), lse.get(), B, T, NH, NH, HD);
    VecD want(g.size());
    for (size_t i = 0; i < g.size(); ++i) want[i] = double(g0[i]) + double(g[i]);
    EXPECT_TRUE(close(dQ3.host(), want, 1e-6, 0)) << "T " << T;
  }
}

// The fp32 kernels (cuda/attention.cu) load tiles as 16-byte vectors when HD is a multiple of 4 and qkv
// and dout are 16-byte aligned, one float at a time otherwise: operands one float off alignment, and head
// sizes that rule the vectors out, give the same bits as the aligned run (T past several tiles,
// grouped-query heads).
TEST_P(AttentionTest, OperandsOffTheVectorAlignmentGiveTheSameBits) {
  k->set_matmul_precision(MatmulPrecision::FP32);
  struct Case {
    int64_t B, T, NH, KVH, HD;
  };
  for (const Case& c :
       {Case{2, 100, 4, 2, 64}, Case{1, 130, 2, 1, 128}, Case{1, 70, 3, 3, 48}, Case{1, 70, 3, 1, 30}}) {
    SCOPED_TRACE("T " + std::to_string(c.T) + " HD " + std::to_string(c.HD));
    const int64_t RS = (c.NH + 2 * c.KVH) * c.HD, rows = c.B * c.T;
    const VecF qkv = random_vec(rows * RS, 91), dout = random_vec(rows * c.NH * c.HD, 92);
    const VecF init = random_vec(rows * RS, 93);
    auto run_at = [&](int64_t offset) {
      return attention_at_offset(*k, qkv, dout, init, c.B, c.T, c.NH, c.KVH, c.HD, offset);
    };
    const VecF aligned = run_at(0);
    EXPECT_TRUE(same_bits(run_at(1), aligned));
    EXPECT_TRUE(same_bits(run_at(3), aligned));
    EXPECT_GT(max_abs(to_double(aligned)), 1e-2);
  }
}

TEST_P(AttentionTest, WorkspaceGrowsAndShrinkingShapesStillWork) {
  const int64_t NH = 2, HD = 4;
  const VecF small = random_vec(1 * 3 * 3 * NH * HD, 78), big = random_vec(3 * 200 * 3 * NH * HD, 79);
  const Result a = forward(small, 1, 3, NH, HD);
  expect_matches_reference(big, 3, 200, NH, HD, 2e-5, 2e-6);  // bounds as in the tile-edge test
  const Result b = forward(small, 1, 3, NH, HD);
  EXPECT_TRUE(same_bits(a.out, b.out));
  EXPECT_TRUE(same_bits(a.lse, b.lse));
}

TEST_P(AttentionTest, RowRangesMatchTheWholeForwardAndNeverReadLaterRows) {
  // Incremental decoding's contract (attention_forward_rows): the rows [q0, q0 + n) computed alone equal
  // the whole forward's, and the qkv rows past q0 + n (a KV cache not written yet) are never read: they
  // hold NaN here, which any read would carry into the output. Ranges inside a tile, across the CPU
  // tile edge (128) and one row at a time (decoding). The rows' logits are the same dot products; the
  // tiles' sums may block differently on the CPU (fewer rows, shorter diagonal tile), so the bound is a
  // few float roundings of |out| <= 1 with T <= 300 keys: 2e-6 (the CUDA kernel gives the same bits).
  const int64_t B = 2, NH = 2, HD = 8, C = NH * HD;
  for (const int64_t T : {13, 300}) {
    const VecF qkv = random_vec(B * T * 3 * C, 95 + uint32_t(T));
    const Result whole = forward(qkv, B, T, NH, HD);
    std::vector<std::pair<int64_t, int64_t>> ranges = {{0, T}, {0, 1}, {T - 1, 1}, {3, 7}};
    if (T > 200) ranges.insert(ranges.end(), {{120, 20}, {128, 1}, {127, 2}, {129, 171}, {250, 50}});
    for (const auto& [q0, n] : ranges) {
      VecF cache = qkv;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t i = (b * T + q0 + n) * 3 * C; i < (b + 1) * T * 3 * C; ++i) cache[i] = std::nanf("");
      Buf Q(*k, cache), out(*k, B * n * C);
      k->fill(out.get(), 7.0f, B * n * C);
      k->attention_forward_rows(out.get(), Q.get(), B, T, NH, NH, HD, q0, n);
      VecD want(size_t(B * n * C));
      for (int64_t b = 0; b < B; ++b)
        for (int64_t e = 0; e < n * C; ++e) want[b * n * C + e] = whole.out[(b * T + q0) * C + e];
      EXPECT_TRUE(close(out.host(), want, 2e-6, 2e-6)) << "T " << T << " rows [" << q0 << ", " << q0 + n << ")";
    }
    VecF stepwise(size_t(B * T * C));  // decoding: one row at a time
    Buf Q(*k, qkv), row(*k, B * C);
    for (int64_t t = 0; t < T; ++t) {
      k->attention_forward_rows(row.get(), Q.get(), B, T, NH, NH, HD, t, 1);
      const VecF r = row.host();
      for (int64_t b = 0; b < B; ++b) std::copy_n(&r[b * C], C, &stepwise[(b * T + t) * C]);
    }
    EXPECT_TRUE(close(stepwise, to_double(whole.out), 2e-6, 2e-6)) << "T " << T << " one row at a time";
  }
}

TEST_P(AttentionTest, RowRangesOutsideTheSequenceAreRefused) {
  const int64_t B = 1, T = 4, NH = 1, HD = 4;
  Buf Q(*k, random_vec(B * T * 3 * HD, 99)), out(*k, B * T * HD);
  EXPECT_THROW(k->attention_forward_rows(out.get(), Q.get(), B, T, NH, NH, HD, 3, 2), Error);
  EXPECT_THROW(k->attention_forward_rows(out.get(), Q.get(), B, T, NH, NH, HD, -1, 1), Error);
}

TRIDENT_INSTANTIATE_KERNEL_SUITE(AttentionTest);

}  // namespace
}  // namespace trident::kt
