// Memory, elementwise, sum of squares, AdamW, token and position embeddings.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/bf16_arithmetic.hpp"
#include "core/error.hpp"
#include "kernel_test_util.hpp"

namespace trident::kt {
namespace {

using trident::test::bf16_by_arithmetic;

class BasicOpsTest : public KernelTest {};

TEST_P(BasicOpsTest, NameSaysTheBackend) { EXPECT_EQ(k->name().rfind(backend(), 0), 0u) << k->name(); }

TEST_P(BasicOpsTest, AllocIsZeroedAndCopiesRoundTrip) {
  // Dirty some memory first, so a recycled block would show up non-zero.
  {
    Buf dirty(*k, random_vec(4099, 1, 1.0f, 2.0f));
  }
  Buf a(*k, 4099);
  for (float x : a.host()) ASSERT_EQ(x, 0.0f);
  const VecF v = random_vec(4099, 2);
  a.set(v);
  EXPECT_TRUE(same_bits(a.host(), v));
  Buf b(*k, 4099);
  k->copy(b.get(), a.get(), 4099);
  EXPECT_TRUE(same_bits(b.host(), v));
  k->fill(b.get(), 3.5f, 4099);
  for (float x : b.host()) ASSERT_EQ(x, 3.5f);
}

// Host-to-device copies let the caller reuse its buffer as soon as they return, whatever their path on
// the backend (CUDA: small ones through a ring of page-locked slots, reused once their copy has run;
// large ones staged by the driver): more small uploads than the ring has slots, each from the same host
// buffer overwritten right after the call, then one larger than a slot; every one arrives intact.
TEST_P(BasicOpsTest, UploadsLetTheCallerReuseItsBufferAtOnce) {
  const int64_t n = 4096, uploads = 27, large = 400 * 1024;  // 16 KiB each; 1.6 MiB > one slot (1 MiB)
  Buf dst(*k, n * uploads), big(*k, large);
  VecF host(n);
  for (int64_t u = 0; u < uploads; ++u) {
    for (int64_t i = 0; i < n; ++i) host[i] = float(u * n + i);
    k->copy_to_device(dst.get() + u * n, host.data(), n);
    std::fill(host.begin(), host.end(), -1.0f);
  }
  VecF large_host(large);
  for (int64_t i = 0; i < large; ++i) large_host[i] = 0.5f * float(i);
  k->copy_to_device(big.get(), large_host.data(), large);
  std::fill(large_host.begin(), large_host.end(), -1.0f);
  const VecF got = dst.host(), got_big = big.host();
  for (int64_t i = 0; i < n * uploads; ++i) ASSERT_EQ(got[i], float(i)) << "element " << i;
  for (int64_t i = 0; i < large; ++i) ASSERT_EQ(got_big[i], 0.5f * float(i)) << "element " << i;
}

// bf16 storage (train.precision = "bf16"): round_to_bf16 rounds in place to nearest, ties to even, and
// keeps patterns that unpack_bf16 turns back into exactly the rounded values; pack_bf16 writes the
// same patterns and leaves its input alone.
TEST_P(BasicOpsTest, Bf16StorageRoundsToNearestEvenAndUnpacksExactly) {
  const float tiny = std::numeric_limits<float>::denorm_min(), big = std::numeric_limits<float>::max();
  VecF x = {1.0f + 0x1p-8f,  1.0f + 3 * 0x1p-8f, -(1.0f + 0x1p-8f), 1.0f + 0x1p-8f + 0x1p-20f, big, -big,
            0x1.fefffep127f, INFINITY, -INFINITY, 0.0f, -0.0f, tiny, 0x1p-133f * 1.5f, 0x1p-126f, 3.0e-39f,
            65504.0f, 1e-30f, -7.3e12f};
  const VecF random = random_vec(70001, 7, -4.0f, 4.0f);
  for (size_t i = 0; i < random.size(); ++i) x.push_back(std::ldexp(random[i], int(i % 200) - 100));
  const int64_t n = int64_t(x.size());
  VecF expected(x.size());
  for (size_t i = 0; i < x.size(); ++i) expected[i] = bf16_by_arithmetic(x[i]);
  ASSERT_EQ(expected[0], 1.0f);                 // a tie goes to the even neighbour, down here
  ASSERT_EQ(expected[1], 1.0f + 0x1p-6f);       // and up here
  ASSERT_EQ(expected[3], 1.0f + 0x1p-7f);       // just above a tie rounds up
  ASSERT_EQ(expected[4], INFINITY);             // fp32's largest is past bf16's
  ASSERT_EQ(expected[6], 0x1.fep127f);          // bf16's largest stays
  uint16_t* packed = k->alloc_bf16(n);
  uint16_t* packed_alone = k->alloc_bf16(n);
  Buf a(*k, x), unpacked(*k, n), unkept(*k, x), untouched(*k, x), from_pack(*k, n);
  k->round_to_bf16(a.get(), packed, n);
  k->unpack_bf16(unpacked.get(), packed, n);
  k->round_to_bf16(unkept.get(), nullptr, n);
  k->pack_bf16(untouched.get(), packed_alone, n);
  k->unpack_bf16(from_pack.get(), packed_alone, n);
  const VecF rounded = a.host(), back = unpacked.host(), alone = unkept.host(), kept = untouched.host(),
             packed_back = from_pack.host();
  k->free(packed);
  k->free(packed_alone);
  EXPECT_TRUE(same_bits(kept, x)) << "pack_bf16 changed its input";
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_TRUE(same_bits({packed_back[i]}, {expected[i]})) << i << ": pack_bf16's pattern of " << x[i];
    ASSERT_TRUE(same_bits({rounded[i]}, {expected[i]})) << i << ": " << x[i] << " -> " << rounded[i] << ", not " << expected[i];
    ASSERT_TRUE(same_bits({back[i]}, {expected[i]})) << i << ": unpacked " << back[i];
    ASSERT_TRUE(same_bits({alone[i]}, {expected[i]})) << i << ": without patterns " << alone[i];
  }
  // NaN stays NaN (any payload, also one that lies in the dropped bits).
  uint32_t payload_low = 0x7f800001u;
  float nan_low;
  std::memcpy(&nan_low, &payload_low, sizeof nan_low);
  Buf nans(*k, VecF{std::nanf(""), nan_low, -std::nanf("")});
  k->round_to_bf16(nans.get(), nullptr, 3);
  for (float v : nans.host()) EXPECT_TRUE(std::isnan(v)) << v;
}

TEST_P(BasicOpsTest, AllocIntIsZeroed) {
  // Integers cannot be read back through the interface; a zeroed token buffer must embed row 0.
  const int64_t N = 5, C = 3, V = 4;
  int32_t* tokens = k->alloc_int(N);
  Buf wte(*k, random_vec(V * C, 3, 1.0f, 2.0f)), out(*k, N * C);
  k->embedding_forward(out.get(), tokens, wte.get(), 0, V, N, C);
  const VecF o = out.host(), w = wte.host();
  for (int64_t i = 0; i < N; ++i)
    for (int64_t c = 0; c < C; ++c) EXPECT_EQ(o[i * C + c], w[c]);
  k->free(tokens);
}

TEST_P(BasicOpsTest, Elementwise) {
  const int64_t n = 1000;
  const VecF a = random_vec(n, 4), b = random_vec(n, 5);
  Buf A(*k, a), B(*k, b), out(*k, n);
  k->add(out.get(), A.get(), B.get(), n);
  VecF o = out.host();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(o[i], a[i] + b[i]);
  k->accumulate(out.get(), A.get(), n);
  o = out.host();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(o[i], (a[i] + b[i]) + a[i]);
  k->scale(A.get(), -0.25f, n);
  o = A.host();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(o[i], a[i] * -0.25f);
}

TEST_P(BasicOpsTest, SumSquaresMatchesDoubleAndIsDeterministic) {
  // Not a multiple of the chunk (8192) nor of the lane count (8); values spread over 6 decades so
  // a float accumulator would be visibly off (relative error ~1e-4 at this length).
  const int64_t n = 3 * 8192 + 13;
  VecF v = random_vec(n, 6);
  for (int64_t i = 0; i < n; i += 7) v[i] *= 1000.0f;
  double want = 0.0;
  for (float x : v) want += double(x) * double(x);
  Buf x(*k, v);
  const double got = k->sum_squares(x.get(), n);
  // Double accumulation over ~25k terms: relative error <= n * 1.1e-16 ~ 3e-12.
  EXPECT_NEAR(got, want, 1e-11 * want);
  const double again = k->sum_squares(x.get(), n);
  EXPECT_EQ(std::memcmp(&got, &again, sizeof got), 0);
  EXPECT_EQ(k->sum_squares(x.get(), 0), 0.0);
  EXPECT_EQ(k->sum_squares(x.get(), 1), double(v[0]) * double(v[0]));
}

TEST_P(BasicOpsTest, DeviceSideSumsAccumulate) {
  // acc += sum x^2 and acc += sum x on a device-side double that starts non-zero: the step's
  // gradient norm adds every tensor into one accumulator and copies it out once.
  const int64_t n = 2 * 8192 + 5;
  const VecF v = random_vec(n, 14);
  double want_sq = 0.0, want_sum = 0.0;
  for (float x : v) {
    want_sq += double(x) * double(x);
    want_sum += double(x);
  }
  Buf x(*k, v);
  double* acc = k->alloc_double(2);
  k->fill_double(acc, 0.5, 2);
  k->sum_squares_into(acc, x.get(), n);
  k->sum_squares_into(acc, x.get(), n);
  k->sum_into(acc + 1, x.get(), n);
  k->sum_into(acc + 1, x.get(), 0);  // adds nothing
  double got[2] = {0, 0};
  k->copy_to_host_double(got, acc, 2);
  k->free(acc);
  // Double accumulation of ~16k float terms: relative error <= n * 1.1e-16 of the sum of |terms|
  // (sum |x| ~ n/2 ~ 8e3, so 1e-9 absolute bounds the plain sum, whose value may be near 0).
  EXPECT_NEAR(got[0], 0.5 + 2.0 * want_sq, 1e-11 * want_sq);
  EXPECT_NEAR(got[1], 0.5 + want_sum, 1e-9);
}

// Clipping with the norm left in backend memory follows clip_gradients' rule, written out here: the factor
// max_norm / (sqrt(sharded + replicated) + 1e-6) in double, stored as float; none (1) at 1 or above.
TEST_P(BasicOpsTest, ClipCoefficientAndScaleByFollowTheHostRule) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  struct Case {
    double sharded, replicated, max_norm;
  };
  const Case cases[] = {{9.0, 16.0, 1.0},     // norm 5: scaled by ~0.2
                        {0.09, 0.16, 1.0},    // norm 0.5: factor ~2, so none
                        {3.0, 1.0, 2.0},      // norm 2: a factor just below 1 (float 0.9999995)
                        {0.0, 0.0, 1.0},      // a zero gradient: none
                        {nan, 0.0, 1.0},      // a NaN norm poisons the gradients, as on the host
                        {inf, 0.0, 1.0}};     // an infinite one zeroes them
  const int64_t n = 3001;
  VecF v = random_vec(n, 21);
  v[5] = -0.0f;
  v[6] = std::numeric_limits<float>::quiet_NaN();
  double* sums = k->alloc_double(2);
  Buf coef(*k, 1);
  for (const Case& c : cases) {
    const double factor = c.max_norm / (std::sqrt(c.sharded + c.replicated) + 1e-6);
    const float want = factor >= 1.0 ? 1.0f : float(factor);
    const double host_sums[2] = {c.sharded, c.replicated};
    // The sums arrive in backend memory as a step leaves them there: filled, then added onto.
    k->fill_double(sums, 0.0, 2);
    k->fill_double(sums, host_sums[0], 1);
    k->fill_double(sums + 1, host_sums[1], 1);
    k->clip_coefficient(coef.get(), sums, c.max_norm);
    const float got = coef.host()[0];
    EXPECT_TRUE(std::memcmp(&got, &want, sizeof got) == 0 || (std::isnan(got) && std::isnan(want)))
        << "sums " << c.sharded << " + " << c.replicated << ", max_norm " << c.max_norm << ": got " << got
        << ", want " << want;
    Buf x(*k, v);
    k->scale_by(x.get(), coef.get(), n);
    const VecF o = x.host();
    if (want == 1.0f) {
      EXPECT_TRUE(same_bits(o, v)) << "a factor of 1 leaves the gradients untouched";
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const float w = v[i] * want;
        ASSERT_TRUE(std::memcmp(&o[i], &w, sizeof w) == 0 || (std::isnan(o[i]) && std::isnan(w))) << i;
      }
    }
  }
  k->free(sums);
}

TEST_P(BasicOpsTest, MemoryAccountFollowsAllocations) {
  const int64_t before = k->allocated_bytes();
  float* p = k->alloc(1000);
  EXPECT_GE(k->allocated_bytes(), before + 4000);
  EXPECT_GE(k->peak_allocated_bytes(), k->allocated_bytes());
  k->free(p);
  EXPECT_EQ(k->allocated_bytes(), before);
}

TEST_P(BasicOpsTest, AdamWTwoStepsByHand) {
  // One parameter, p0 = 1, g1 = 0.5, g2 = -0.25, lr 0.01, betas (0.9, 0.95), eps 1e-8, wd 0.1.
  // Step 1: p = 0.999; m = 0.05; v = 0.0125; m^ = 0.05/0.1 = 0.5; v^ = 0.0125/0.05 = 0.25;
  //         p = 0.999 - 0.01 * 0.5 / (0.5 + 1e-8) = 0.9890000002.
  // Step 2: p = 0.9890000002 * 0.999 = 0.9880110002; m = 0.045 - 0.025 = 0.02;
  //         v = 0.011875 + 0.003125 = 0.015; m^ = 0.02/0.19 = 0.1052631579;
  //         v^ = 0.015/0.0975 = 0.1538461538, sqrt = 0.3922322703;
  //         p = 0.9880110002 - 0.01 * 0.1052631579 / 0.3922322703 = 0.9853273058.
  // The second element has g = 0 always: only the decay acts, p = 2 * 0.999^2.
  // Tolerances: the interface passes betas as float, and 0.9f, 0.95f differ from 0.9, 0.95 by ~2.5e-8,
  // so 1 - beta is ~2.4e-7 relatively off the decimal hand values: m, v are checked to 1e-6 relative;
  // p to 2-3 float ulps (the (1 - beta1) factor cancels between m and the bias correction).
  Buf p(*k, VecF{1.0f, 2.0f}), g(*k, VecF{0.5f, 0.0f}), m(*k, 2), v(*k, 2);
  k->adamw_update(p.get(), g.get(), m.get(), v.get(), 2, {{0, 0.1f}}, {0.01f, 0.9f, 0.95f, 1e-8f, 1}, nullptr);
  VecF ph = p.host();
  EXPECT_NEAR(ph[0], 0.9890000002, 2e-7);  // float: 1 ulp at 1 is 1.2e-7
  EXPECT_NEAR(m.host()[0], 0.05, 0.05 * 1e-6);
  EXPECT_NEAR(v.host()[0], 0.0125, 0.0125 * 1e-6);
  g.set(VecF{-0.25f, 0.0f});
  k->adamw_update(p.get(), g.get(), m.get(), v.get(), 2, {{0, 0.1f}}, {0.01f, 0.9f, 0.95f, 1e-8f, 2}, nullptr);
  ph = p.host();
  EXPECT_NEAR(ph[0], 0.9853273058, 3e-7);
  EXPECT_NEAR(m.host()[0], 0.02, 0.02 * 1e-6);
  EXPECT_NEAR(v.host()[0], 0.015, 0.015 * 1e-6);
  EXPECT_NEAR(ph[1], 2.0 * 0.999 * 0.999, 3e-7);
}

TEST_P(BasicOpsTest, AdamWMatchesDoubleFormulaOverManyElements) {
  const int64_t n = 777;
  const float lr = 3e-4f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
  VecD pd = to_double(random_vec(n, 7)), md(n, 0.0), vd(n, 0.0);
  Buf p(*k, to_float(pd)), m(*k, n), v(*k, n), g(*k, n);
  for (int step = 1; step <= 3; ++step) {
    const VecF gh = random_vec(n, 100 + step);
    g.set(gh);
    k->adamw_update(p.get(), g.get(), m.get(), v.get(), n, {{0, wd}}, {lr, b1, b2, eps, step}, nullptr);
    for (int64_t i = 0; i < n; ++i) {
      pd[i] *= 1.0 - double(lr) * wd;
      md[i] = b1 * md[i] + (1.0 - b1) * gh[i];
      vd[i] = b2 * vd[i] + (1.0 - b2) * double(gh[i]) * gh[i];
      const double mh = md[i] / (1.0 - std::pow(double(b1), step));
      const double vh = vd[i] / (1.0 - std::pow(double(b2), step));
      pd[i] -= lr * mh / (std::sqrt(vh) + eps);
    }
  }
  // |p| <= 1 and three float updates: a few ulp (1.2e-7) each.
  EXPECT_TRUE(close(p.host(), pd, 1e-6, 0));
  EXPECT_TRUE(close(m.host(), md, 1e-7, 1e-5));
  EXPECT_TRUE(close(v.host(), vd, 1e-9, 1e-5));
}

// The multi-tensor pass: 150 segments of uneven sizes (1 to ~1000 elements; more than one CUDA launch
// holds) with three weight decays, each element decayed by its own segment's, against the double
// formula; and the bf16 working copy written in the same pass holds the patterns of the updated fp32
// value rounded to bf16 (this file's arithmetic rounding), while p keeps the fp32 value (the master).
TEST_P(BasicOpsTest, AdamWSegmentsDecayByTheirOwnWeightDecayAndWriteTheBf16Copy) {
  const float lr = 0.05f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
  const float decays[] = {0.1f, 0.0f, 0.5f};
  std::vector<AdamWSegment> segments;
  std::vector<double> wd_of;
  for (int s = 0; s < 150; ++s) {
    segments.push_back({int64_t(wd_of.size()), decays[s % 3]});
    const int64_t size = s == 7 ? 1 : 1 + (int64_t(s) * 7919) % 997;
    wd_of.insert(wd_of.end(), size_t(size), double(decays[s % 3]));
  }
  const int64_t n = int64_t(wd_of.size());
  VecD pd = to_double(random_vec(n, 11)), md(n, 0.0), vd(n, 0.0);
  Buf p(*k, to_float(pd)), m(*k, n), v(*k, n), g(*k, n), widened(*k, n);
  uint16_t* working = k->alloc_bf16(n);
  for (int step = 1; step <= 2; ++step) {
    const VecF gh = random_vec(n, 200 + step);
    g.set(gh);
    k->adamw_update(p.get(), g.get(), m.get(), v.get(), n, segments, {lr, b1, b2, eps, step}, working);
    for (int64_t i = 0; i < n; ++i) {
      pd[i] *= 1.0 - double(lr) * wd_of[size_t(i)];
      md[i] = b1 * md[i] + (1.0 - b1) * gh[i];
      vd[i] = b2 * vd[i] + (1.0 - b2) * double(gh[i]) * gh[i];
      pd[i] -= lr * (md[i] / (1.0 - std::pow(double(b1), step))) /
               (std::sqrt(vd[i] / (1.0 - std::pow(double(b2), step))) + eps);
    }
  }
  k->unpack_bf16(widened.get(), working, n);
  k->free(working);
  const VecF ph = p.host(), wh = widened.host();
  EXPECT_TRUE(close(ph, pd, 1e-6, 0));
  // A decay of 0.5 at lr 0.05 moves p by 2.5% a step, 0.1 by 0.5%: a wrong segment is far outside 1e-6.
  for (int64_t i = 0; i < n; ++i)
    ASSERT_TRUE(same_bits({wh[size_t(i)]}, {bf16_by_arithmetic(ph[size_t(i)])}))
        << i << ": working copy " << wh[size_t(i)] << " of master " << ph[size_t(i)];
  EXPECT_FALSE(same_bits(wh, ph)) << "the masters were rounded too";
}

TEST_P(BasicOpsTest, AdamWRefusesSegmentsThatDoNotStartAtZeroOrDoNotIncrease) {
  Buf p(*k, 4), m(*k, 4), v(*k, 4), g(*k, 4);
  const AdamWStep h{0.01f, 0.9f, 0.95f, 1e-8f, 1};
  EXPECT_THROW(k->adamw_update(p.get(), g.get(), m.get(), v.get(), 4, {{1, 0.1f}}, h, nullptr), Error);
  EXPECT_THROW(k->adamw_update(p.get(), g.get(), m.get(), v.get(), 4, {{0, 0.1f}, {0, 0.f}}, h, nullptr), Error);
  EXPECT_THROW(k->adamw_update(p.get(), g.get(), m.get(), v.get(), 4, {{0, 0.1f}, {4, 0.f}}, h, nullptr), Error);
  EXPECT_THROW(k->adamw_update(p.get(), g.get(), m.get(), v.get(), 4, {}, h, nullptr), Error);
}

// The token embedding read from bf16 patterns (a bf16 working copy's, embedding_forward_bf16): each
// in-shard row is the table's values rounded to bf16 by this file's arithmetic (the patterns written by
// round_to_bf16), every other row 0, over whatever out held.
TEST_P(BasicOpsTest, EmbeddingForwardReadsBf16Patterns) {
  const int64_t N = 8, C = 5, vb = 3, vc = 4;
  const std::vector<int32_t> tok = {3, 9, 5, 0, 6, 5, 3, 7};
  const VecF wte = random_vec(vc * C, 8);
  IntBuf tokens(*k, tok);
  Buf W(*k, wte), out(*k, random_vec(N * C, 10));
  uint16_t* patterns = k->alloc_bf16(vc * C);
  k->round_to_bf16(W.get(), patterns, vc * C);
  k->embedding_forward_bf16(out.get(), tokens.get(), patterns, vb, vc, N, C);
  const VecF o = out.host();
  k->free(patterns);
  int64_t rounded = 0;
  for (int64_t i = 0; i < N; ++i)
    for (int64_t c = 0; c < C; ++c) {
      const bool in = tok[i] >= vb && tok[i] < vb + vc;
      const float want = in ? bf16_by_arithmetic(wte[(tok[i] - vb) * C + c]) : 0.0f;
      ASSERT_EQ(o[i * C + c], want) << i << "," << c;
      rounded += in && want != wte[(tok[i] - vb) * C + c];
    }
  EXPECT_GT(rounded, 0) << "no row value differed from its fp32: nothing shows the patterns were read";
}

// Vocab shard [3, 7) of an 10-token vocabulary; tokens outside the shard embed to 0.
TEST_P(BasicOpsTest, EmbeddingShardForwardBackward) {
  const int64_t N = 8, C = 5, vb = 3, vc = 4;
  const std::vector<int32_t> tok = {3, 9, 5, 0, 6, 5, 3, 7};
  const VecF wte = random_vec(vc * C, 8);
  IntBuf tokens(*k, tok);
  Buf W(*k, wte), out(*k, N * C);
  k->embedding_forward(out.get(), tokens.get(), W.get(), vb, vc, N, C);
  const VecF o = out.host();
  for (int64_t i = 0; i < N; ++i)
    for (int64_t c = 0; c < C; ++c) {
      const bool in = tok[i] >= vb && tok[i] < vb + vc;
      ASSERT_EQ(o[i * C + c], in ? wte[(tok[i] - vb) * C + c] : 0.0f) << i << "," << c;
    }
  // Backward vs FD of L = sum(out * R) (linear in wte: FD exact up to rounding).
  const VecF R = random_vec(N * C, 9);
  auto L = [&](const VecD& w) {
    VecD ref(N * C, 0.0);
    for (int64_t i = 0; i < N; ++i)
      if (tok[i] >= vb && tok[i] < vb + vc)
        for (int64_t c = 0; c < C; ++c) ref[i * C + c] = w[(tok[i] - vb) * C + c];
    return dot(ref, R);
  };
  const VecD fd = fd_gradient(L, to_double(wte));
  Buf dout(*k, R), dW(*k, vc * C);
  k->embedding_backward(dW.get(), dout.get(), tokens.get(), vb, vc, N, C);
  const VecF g1 = dW.host();
  EXPECT_TRUE(close(g1, fd, 1e-6, 1e-6));  // sums of <= 2 floats
  // Unused rows of the shard (token 4) get exactly 0.
  for (int64_t c = 0; c < C; ++c) EXPECT_EQ(g1[(4 - vb) * C + c], 0.0f);
  k->embedding_backward(dW.get(), dout.get(), tokens.get(), vb, vc, N, C);
  EXPECT_TRUE(close(dW.host(), scaled(g1, 2.0), 0, 1e-6));
  Buf dW2(*k, vc * C);
  k->embedding_backward(dW2.get(), dout.get(), tokens.get(), vb, vc, N, C);
  EXPECT_TRUE(same_bits(dW2.host(), g1));
}

TEST_P(BasicOpsTest, PositionForwardBackwardWithOffset) {
  const int64_t B = 3, T = 4, C = 6, t0 = 2, rows = t0 + T + 1;
  const VecF x = random_vec(B * T * C, 10), wpe = random_vec(rows * C, 11);
  Buf out(*k, x), W(*k, wpe);
  k->position_forward(out.get(), W.get(), B, T, C, t0);
  const VecF o = out.host();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c)
        ASSERT_EQ(o[(b * T + t) * C + c], x[(b * T + t) * C + c] + wpe[(t0 + t) * C + c]);
  const VecF R = random_vec(B * T * C, 12);
  auto L = [&](const VecD& w) {
    VecD ref(B * T * C);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < C; ++c) ref[(b * T + t) * C + c] = x[(b * T + t) * C + c] + w[(t0 + t) * C + c];
    return dot(ref, R);
  };
  const VecD fd = fd_gradient(L, to_double(wpe));
  const VecF base = random_vec(rows * C, 13);
  Buf dW(*k, base), dout(*k, R);
  k->position_backward(dW.get(), dout.get(), B, T, C, t0);
  const VecF g = dW.host();
  VecD want(rows * C);
  for (int64_t i = 0; i < rows * C; ++i) want[i] = base[i] + fd[i];
  EXPECT_TRUE(close(g, want, 1e-6, 1e-6));  // sums of 3 floats
  // Rows outside [t0, t0+T) are untouched bit for bit.
  for (int64_t r : {int64_t(0), int64_t(1), rows - 1})
    for (int64_t c = 0; c < C; ++c) EXPECT_EQ(g[r * C + c], base[r * C + c]);
}

TRIDENT_INSTANTIATE_KERNEL_SUITE(BasicOpsTest);

}  // namespace
}  // namespace trident::kt
