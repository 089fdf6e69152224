// Attention under the matmul precision BF16 (Kernels::set_matmul_precision, attention_follows_bf16):
// forward and backward against a double-precision computation from q, k, v and dout rounded to bf16 by
// this file's own arithmetic (frexp/nearbyint), on the Kokkos backend and on the CUDA backend's
// tensor-core kernels (cuda/attention_tc.cu; on gpu-sim in a gpu-sim build), head sizes 64 and 128,
// several T including ones that are not multiples of any tile, grouped-query heads; plus: the rounding
// moves the results by more than the bound (so a path that skipped it fails), bit-identical reruns,
// accumulation into dqkv, other head sizes and FP32 unaffected.
//
// The reference keeps P and dS exact; the kernels round them to bf16 before their products, and
// compute in fp32. Bound per output element, with the unit roundoffs u = 2^-24 (fp32, 24 significant
// bits) and r = 2^-8 (bf16, 8 significant bits: half a unit in the last place is at most 2^-8 relative):
//   s_ij = scale q_i.k_j: fp32 sums of HD exact products, |ds| <= ds_i = scale (HD+2) u max_j sum|q k|;
//   p_ij = exp(s_ij - lse_i): relative error ep_i = 2 ds_i + (T + 8 + |lse_i|) u (the perturbed logits,
//     the row max or lse, T-term fp32 sums and exp/log to a few ulp);
//   out_id = sum_j p_ij v_jd: (r + ep_i + (T+4) u) sum_j p_ij |v_jd|   (P rounded once: r);
//   lse_i: ds_i + (T + 4 + |lse_i|) u;
//   dv_jd = sum_i p_ij g_id: (r + ep_i + (T+2) u) sum_i p_ij |g_id|;
//   dS_ij = p_ij (dP_ij - D_i), dP = g.v in fp32: its error e_ij = p_ij (ep_i |dP - D| + (HD+2) u sum|g v|
//     + u |D_i|) + u |dS|; rounded: r |dS| + e_ij;
//   dq_id = scale sum_j dS_ij k_jd: scale sum_j (r |dS_ij| + e_ij + (T+2) u |dS_ij|) |k_jd|, dk alike.
// The tests allow twice these bounds (as test_matmul_precision.cpp does) plus u |value| for the
// accumulation into dqkv. A real GPU's tensor cores round their fp32 accumulation in an undocumented
// way (gpu-sim sums each 16-term chunk exactly): within the (HD+2) u and (T+2) u terms.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "kernel_test_util.hpp"

namespace trident::kt {
namespace {

constexpr double kU = 0x1p-24;  // fp32 unit roundoff
constexpr double kR = 0x1p-8;   // bf16 unit roundoff
constexpr double kSlack = 2.0;  // the tests allow twice the derived bounds

// x rounded to bf16 (8 significant bits), to nearest with ties to even, on its value.
double round_bf16(double x) {
  if (x == 0.0) return 0.0;
  int e = 0;
  const double m = std::frexp(x, &e);
  return std::ldexp(std::nearbyint(std::ldexp(m, 8)), e - 8);
}

struct Shape {
  int64_t B, T, NH, KVH, HD;
  int64_t RS() const { return (NH + 2 * KVH) * HD; }
  int64_t C() const { return NH * HD; }
  std::string name() const {
    return "B" + std::to_string(B) + " T" + std::to_string(T) + " NH" + std::to_string(NH) + " KVH" +
           std::to_string(KVH) + " HD" + std::to_string(HD);
  }
};

// The shapes: HD 64 and 128, T = 1, below, at and past a 64-tile and past the CPU's 128-tile,
// multi-head, grouped-query and multi-query.
const Shape kShapes[] = {{1, 1, 2, 1, 64}, {2, 37, 4, 2, 64}, {1, 130, 4, 2, 64}, {1, 64, 2, 2, 128},
                         {2, 100, 4, 1, 128}};

// The reference's values and the bound of each element (already times kSlack).
struct Expected {
  VecD out, lse, dqkv;
  VecD out_bound, lse_bound, dqkv_bound;
};

// Attention of qkv (values as given: rounded or not), its gradient for dout g, and the bounds above.
// out_given/lse_given: the forward's outputs as the backward receives them (fp32). dqkv starts at init.
Expected reference(const Shape& s, const VecD& qkv, const VecD& g, const VecD& init) {
  const int64_t B = s.B, T = s.T, NH = s.NH, KVH = s.KVH, HD = s.HD, RS = s.RS(), C = s.C(), group = NH / KVH;
  const double scale = 1.0 / std::sqrt(double(HD));
  Expected e;
  e.out.assign(B * T * C, 0.0);
  e.out_bound.assign(B * T * C, 0.0);
  e.lse.assign(B * NH * T, 0.0);
  e.lse_bound.assign(B * NH * T, 0.0);
  e.dqkv = init;
  e.dqkv_bound.assign(init.size(), 0.0);
  auto q_at = [&](int64_t b, int64_t t, int64_t h) { return (b * T + t) * RS + h * HD; };
  auto k_at = [&](int64_t b, int64_t t, int64_t h) { return (b * T + t) * RS + (NH + h / group) * HD; };
  auto v_at = [&](int64_t b, int64_t t, int64_t h) { return k_at(b, t, h) + KVH * HD; };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < T; ++t) {
        VecD sc(t + 1);
        double m = -INFINITY, ds_err = 0.0;
        for (int64_t j = 0; j <= t; ++j) {
          double d = 0.0, mag = 0.0;
          for (int64_t x = 0; x < HD; ++x) {
            d += qkv[q_at(b, t, h) + x] * qkv[k_at(b, j, h) + x];
            mag += std::fabs(qkv[q_at(b, t, h) + x] * qkv[k_at(b, j, h) + x]);
          }
          sc[j] = d * scale;
          m = std::max(m, sc[j]);
          ds_err = std::max(ds_err, scale * double(HD + 2) * kU * mag + kU * std::fabs(sc[j]));
        }
        double z = 0.0;
        for (int64_t j = 0; j <= t; ++j) z += std::exp(sc[j] - m);
        const double lse = m + std::log(z);
        const int64_t row = (b * NH + h) * T + t;
        e.lse[row] = lse;
        e.lse_bound[row] = kSlack * (ds_err + double(T + 4 + std::fabs(lse)) * kU);
        const double ep = 2 * ds_err + double(T + 8 + std::fabs(lse)) * kU;
        VecD p(t + 1);
        for (int64_t j = 0; j <= t; ++j) p[j] = std::exp(sc[j] - lse);
        const int64_t o = (b * T + t) * C + h * HD;
        for (int64_t j = 0; j <= t; ++j)
          for (int64_t x = 0; x < HD; ++x) {
            e.out[o + x] += p[j] * qkv[v_at(b, j, h) + x];
            e.out_bound[o + x] += kSlack * (kR + ep + double(T + 4) * kU) * p[j] * std::fabs(qkv[v_at(b, j, h) + x]);
          }
        // Backward from the forward's out and lse as fp32 values (what the kernel receives).
        double D = 0.0;
        for (int64_t x = 0; x < HD; ++x) D += g[o + x] * double(float(e.out[o + x]));
        const double lse_f = double(float(lse));
        for (int64_t j = 0; j <= t; ++j) {
          const double pj = std::exp(sc[j] - lse_f);
          double dp = 0.0, dp_mag = 0.0;
          for (int64_t x = 0; x < HD; ++x) {
            dp += g[o + x] * qkv[v_at(b, j, h) + x];
            dp_mag += std::fabs(g[o + x] * qkv[v_at(b, j, h) + x]);
          }
          const double dS = pj * (dp - D);
          const double err = pj * (ep * std::fabs(dp - D) + double(HD + 2) * kU * dp_mag + kU * std::fabs(D)) +
                             kU * std::fabs(dS);
          const double ds_bound = kR * std::fabs(dS) + err + double(T + 2) * kU * std::fabs(dS);
          for (int64_t x = 0; x < HD; ++x) {
            e.dqkv[q_at(b, t, h) + x] += scale * dS * qkv[k_at(b, j, h) + x];
            e.dqkv_bound[q_at(b, t, h) + x] += kSlack * scale * ds_bound * std::fabs(qkv[k_at(b, j, h) + x]);
            e.dqkv[k_at(b, j, h) + x] += scale * dS * qkv[q_at(b, t, h) + x];
            e.dqkv_bound[k_at(b, j, h) + x] += kSlack * scale * ds_bound * std::fabs(qkv[q_at(b, t, h) + x]);
            e.dqkv[v_at(b, j, h) + x] += pj * g[o + x];
            e.dqkv_bound[v_at(b, j, h) + x] +=
                kSlack * (kR + ep + double(T + 2) * kU) * pj * std::fabs(g[o + x]);
          }
        }
      }
  for (size_t i = 0; i < e.dqkv.size(); ++i) e.dqkv_bound[i] += kSlack * kU * std::fabs(e.dqkv[i]);
  return e;
}

// max_i |got_i - want_i| / bound_i.
double worst_ratio(const VecF& got, const VecD& want, const VecD& bound) {
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - want[i]);
    worst = std::max(worst, bound[i] > 0 ? err / bound[i] : (err > 0 ? INFINITY : 0.0));
    if (std::isnan(got[i])) return INFINITY;
  }
  return worst;
}

::testing::AssertionResult within_bound(const char* what, const VecF& got, const VecD& want, const VecD& bound) {
  if (max_abs(want) < 1e-3) return ::testing::AssertionFailure() << what << ": degenerate reference";
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - want[i]);
    if (!(err <= bound[i]))
      return ::testing::AssertionFailure() << what << "[" << i << "] got " << got[i] << " want " << want[i]
                                           << " error " << err << " > bound " << bound[i];
  }
  return ::testing::AssertionSuccess();
}

class AttentionBf16Test : public KernelTest {
 protected:
  struct Inputs {
    VecF qkv, dout, init;
  };
  // q and k in [-3, 3] (scores of standard deviation ~3: a peaked softmax, sensitive to the rounding of
  // q and k), v and dout in [-1, 1], dqkv's initial values in [-1, 1].
  static Inputs inputs(const Shape& s, uint32_t seed) {
    Inputs in;
    in.qkv = random_vec(s.B * s.T * s.RS(), seed, -1.0f, 1.0f);
    for (int64_t r = 0; r < s.B * s.T; ++r)
      for (int64_t x = 0; x < (s.NH + s.KVH) * s.HD; ++x) in.qkv[r * s.RS() + x] *= 3.0f;
    in.dout = random_vec(s.B * s.T * s.C(), seed + 1);
    in.init = random_vec(s.B * s.T * s.RS(), seed + 2);
    return in;
  }
  static VecD bf16_values(const VecF& v) {
    VecD r(v.size());
    for (size_t i = 0; i < v.size(); ++i) r[i] = round_bf16(v[i]);
    return r;
  }

  struct Outputs {
    VecF out, lse, dqkv;
  };
  // The kernels' forward, then their backward from the given out and lse (the reference's, so that the
  // backward is checked on its own), accumulating into init.
  Outputs run(const Shape& s, const Inputs& in, const VecF& out_for_backward, const VecF& lse_for_backward) {
    Buf qkv(*k, in.qkv), out(*k, s.B * s.T * s.C()), lse(*k, s.B * s.NH * s.T);
    Buf dout(*k, in.dout), dqkv(*k, in.init), out_b(*k, out_for_backward), lse_b(*k, lse_for_backward);
    k->attention_forward(out.get(), lse.get(), qkv.get(), s.B, s.T, s.NH, s.KVH, s.HD);
    k->attention_backward(dqkv.get(), dout.get(), qkv.get(), out_b.get(), lse_b.get(), s.B, s.T, s.NH, s.KVH, s.HD);
    return {out.host(), lse.host(), dqkv.host()};
  }
};

TEST_P(AttentionBf16Test, ForwardAndBackwardMatchTheDoubleComputationOfBf16Operands) {
  k->set_matmul_precision(MatmulPrecision::BF16);
  uint32_t seed = 100;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(s.name());
    const Inputs in = inputs(s, seed += 10);
    const Expected e = reference(s, bf16_values(in.qkv), bf16_values(in.dout), to_double(in.init));
    const Outputs got = run(s, in, to_float(e.out), to_float(e.lse));
    EXPECT_TRUE(within_bound("out", got.out, e.out, e.out_bound));
    EXPECT_TRUE(within_bound("lse", got.lse, e.lse, e.lse_bound));
    EXPECT_TRUE(within_bound("dqkv", got.dqkv, e.dqkv, e.dqkv_bound));
    std::printf("[bf16 attention] %-28s %s: error / bound: out %.3f lse %.3f dqkv %.3f\n", s.name().c_str(),
                backend().c_str(), worst_ratio(got.out, e.out, e.out_bound), worst_ratio(got.lse, e.lse, e.lse_bound),
                worst_ratio(got.dqkv, e.dqkv, e.dqkv_bound));
  }
}

// Against the computation from the unrounded operands (and the same bounds), the results are off by more
// than the bound: the rounding happens, in the forward and in each part of the gradient.
TEST_P(AttentionBf16Test, RoundingMovesTheResultsBeyondTheBound) {
  k->set_matmul_precision(MatmulPrecision::BF16);
  for (const Shape& s : {kShapes[2], kShapes[4]}) {
    SCOPED_TRACE(s.name());
    const Inputs in = inputs(s, 7);
    const Expected rounded = reference(s, bf16_values(in.qkv), bf16_values(in.dout), to_double(in.init));
    const Expected exact = reference(s, to_double(in.qkv), to_double(in.dout), to_double(in.init));
    const Outputs got = run(s, in, to_float(rounded.out), to_float(rounded.lse));
    // The parts of dqkv: q, k and v columns of each row.
    auto part = [&](const VecF& v, int64_t begin, int64_t end) {
      VecF r;
      for (int64_t row = 0; row < s.B * s.T; ++row)
        r.insert(r.end(), v.begin() + row * s.RS() + begin, v.begin() + row * s.RS() + end);
      return r;
    };
    auto part_d = [&](const VecD& v, int64_t begin, int64_t end) {
      VecD r;
      for (int64_t row = 0; row < s.B * s.T; ++row)
        r.insert(r.end(), v.begin() + row * s.RS() + begin, v.begin() + row * s.RS() + end);
      return r;
    };
    const int64_t q_end = s.C(), k_end = q_end + s.KVH * s.HD, v_end = s.RS();
    const double out_moved = worst_ratio(got.out, exact.out, rounded.out_bound);
    const double dq_moved = worst_ratio(part(got.dqkv, 0, q_end), part_d(exact.dqkv, 0, q_end),
                                        part_d(rounded.dqkv_bound, 0, q_end));
    const double dk_moved = worst_ratio(part(got.dqkv, q_end, k_end), part_d(exact.dqkv, q_end, k_end),
                                        part_d(rounded.dqkv_bound, q_end, k_end));
    const double dv_moved = worst_ratio(part(got.dqkv, k_end, v_end), part_d(exact.dqkv, k_end, v_end),
                                        part_d(rounded.dqkv_bound, k_end, v_end));
    std::printf("[bf16 attention] %-28s %s: error / bound against unrounded operands: out %.2f dq %.2f dk %.2f "
                "dv %.2f\n",
                s.name().c_str(), backend().c_str(), out_moved, dq_moved, dk_moved, dv_moved);
    EXPECT_GT(out_moved, 1.0);
    EXPECT_GT(dq_moved, 1.0);
    EXPECT_GT(dk_moved, 1.0);
    EXPECT_GT(dv_moved, 1.0);
  }
}

// Two runs give the same bits; the backward adds onto what dqkv holds: from zero it gives the gradient
// alone, and from init, init plus that gradient (the Kokkos backend adds each tile's GEMM onto dqkv in
// turn, so the sums round differently: a few units of fp32 of values below 10, within 1e-5).
TEST_P(AttentionBf16Test, RerunsAreBitIdenticalAndBackwardAccumulates) {
  k->set_matmul_precision(MatmulPrecision::BF16);
  const Shape s = kShapes[4];
  const Inputs in = inputs(s, 21);
  Buf qkv(*k, in.qkv), out(*k, s.B * s.T * s.C()), lse(*k, s.B * s.NH * s.T), dout(*k, in.dout);
  k->attention_forward(out.get(), lse.get(), qkv.get(), s.B, s.T, s.NH, s.KVH, s.HD);
  const VecF out1 = out.host(), lse1 = lse.host();
  Buf dqkv(*k, in.init), grad(*k, VecF(in.init.size(), 0.0f));
  k->attention_backward(dqkv.get(), dout.get(), qkv.get(), out.get(), lse.get(), s.B, s.T, s.NH, s.KVH, s.HD);
  k->attention_backward(grad.get(), dout.get(), qkv.get(), out.get(), lse.get(), s.B, s.T, s.NH, s.KVH, s.HD);
  const VecF accumulated = dqkv.host(), alone = grad.host();

  k->attention_forward(out.get(), lse.get(), qkv.get(), s.B, s.T, s.NH, s.KVH, s.HD);
  EXPECT_TRUE(same_bits(out.host(), out1));
  EXPECT_TRUE(same_bits(lse.host(), lse1));
  dqkv.set(in.init);
  k->attention_backward(dqkv.get(), dout.get(), qkv.get(), out.get(), lse.get(), s.B, s.T, s.NH, s.KVH, s.HD);
  EXPECT_TRUE(same_bits(dqkv.host(), accumulated));
  for (size_t i = 0; i < alone.size(); ++i)
    ASSERT_NEAR(accumulated[i], in.init[i] + alone[i], 1e-5) << i << ": the backward must add its gradient onto dqkv";
  EXPECT_GT(max_abs(to_double(alone)), 1e-2);
}

// The CUDA kernels load their tiles as 16-byte vectors when qkv and dout are 16-byte aligned and one
// float at a time otherwise (cuda/attention_tc.cu): operands one float past an aligned address take the
// other path and must give the same bits, forward and backward (HD 64 and 128, T past a tile).
TEST_P(AttentionBf16Test, OperandsOffTheVectorAlignmentGiveTheSameBits) {
  k->set_matmul_precision(MatmulPrecision::BF16);
  for (const Shape& s : {kShapes[2], kShapes[4]}) {
    SCOPED_TRACE(s.name());
    const Inputs in = inputs(s, 57);
    auto run_at = [&](int64_t offset) {
      return attention_at_offset(*k, in.qkv, in.dout, in.init, s.B, s.T, s.NH, s.KVH, s.HD, offset);
    };
    const VecF aligned = run_at(0);
    EXPECT_TRUE(same_bits(run_at(1), aligned));
    EXPECT_GT(max_abs(to_double(aligned)), 1e-2);
  }
}

// Head sizes other than 64 and 128 stay fp32 under BF16, and FP32 after BF16 gives the fp32 bits.
TEST_P(AttentionBf16Test, OtherHeadSizesAndFp32AreUnrounded) {
  for (const Shape& s : {Shape{1, 70, 4, 2, 48}, Shape{1, 70, 2, 1, 64}}) {
    SCOPED_TRACE(s.name());
    const Inputs in = inputs(s, 33);
    auto forward_backward = [&](MatmulPrecision p) {
      k->set_matmul_precision(p);
      Buf qkv(*k, in.qkv), out(*k, s.B * s.T * s.C()), lse(*k, s.B * s.NH * s.T), dout(*k, in.dout);
      Buf dqkv(*k, in.init);
      k->attention_forward(out.get(), lse.get(), qkv.get(), s.B, s.T, s.NH, s.KVH, s.HD);
      k->attention_backward(dqkv.get(), dout.get(), qkv.get(), out.get(), lse.get(), s.B, s.T, s.NH, s.KVH, s.HD);
      VecF all = out.host();
      const VecF d = dqkv.host();
      all.insert(all.end(), d.begin(), d.end());
      return all;
    };
    const VecF fp32 = forward_backward(MatmulPrecision::FP32);
    const VecF bf16 = forward_backward(MatmulPrecision::BF16);
    const VecF fp32_again = forward_backward(MatmulPrecision::FP32);
    EXPECT_TRUE(same_bits(fp32, fp32_again));
    EXPECT_EQ(same_bits(fp32, bf16), s.HD != 64) << "bf16 attention only for head sizes 64 and 128";
  }
}

TRIDENT_INSTANTIATE_KERNEL_SUITE(AttentionBf16Test);

}  // namespace
}  // namespace trident::kt
