// Fused softmax cross-entropy in three phases: values, gradient (FD), padding, vocab shards,
// large logits, determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernel_test_util.hpp"

namespace trident::kt {
namespace {

class XentTest : public KernelTest {
 protected:

  struct Result {
    VecF losses, grad, rowmax, sumexp, target_logit;
  };
  // All three phases on one (unsharded) [N, stride] logits buffer.
  Result run(const VecF& logits, const std::vector<int32_t>& targets, int64_t N, int64_t stride, int64_t vc,
             float dloss_scale) {
    Buf L(*k, logits), rowmax(*k, N), sumexp(*k, N), tl(*k, N), losses(*k, N);
    IntBuf T(*k, targets);
    k->xent_row_max(rowmax.get(), L.get(), N, stride, vc);
    k->xent_sumexp_target(sumexp.get(), tl.get(), L.get(), rowmax.get(), T.get(), 0, N, stride, vc);
    k->xent_loss_grad(losses.get(), L.get(), rowmax.get(), sumexp.get(), tl.get(), T.get(), 0, dloss_scale, N,
                      stride, vc);
    return {losses.host(), L.host(), rowmax.host(), sumexp.host(), tl.host()};
  }
};

// Reference gradient of dloss_scale * sum_i loss_i by central differences of the double reference.
VecD fd_xent(const VecF& logits, const std::vector<int32_t>& targets, int64_t N, int64_t V, double scale) {
  return fd_gradient(
      [&](const VecD& v) {
        double s = 0.0;
        for (double l : ref_xent(v, targets, N, V)) s += l;
        return scale * s;
      },
      to_double(logits));
}

TEST_P(XentTest, LossAndGradientMatchReference) {
  const int64_t N = 4, V = 11;
  const VecF logits = random_vec(N * V, 80, -3.0f, 3.0f);
  const std::vector<int32_t> targets = {0, 10, 5, 5};
  const float scale = 1.0f / N;
  const Result r = run(logits, targets, N, V, V, scale);
  // Double sums over 11 terms, float exp/log: ~1e-7 relative.
  EXPECT_TRUE(close(r.losses, ref_xent(to_double(logits), targets, N, V), 1e-6, 1e-6));
  // Gradient entries are softmax/N - onehot/N in [-0.25, 0.25]; float error ~1e-8.
  EXPECT_TRUE(close(r.grad, fd_xent(logits, targets, N, V, scale), 1e-6, 1e-5));
  for (int64_t i = 0; i < N; ++i) EXPECT_EQ(r.target_logit[i], logits[i * V + targets[i]]);
}

// A negative target (an evaluation's padding): loss 0 and a zero gradient row; the other rows as
// without it, bit for bit.
TEST_P(XentTest, NegativeTargetsAreNotScored) {
  const int64_t N = 4, V = 11;
  const VecF logits = random_vec(N * V, 82, -3.0f, 3.0f);
  const std::vector<int32_t> all = {3, 0, 10, 7}, masked = {3, -1, 10, -1};
  const Result a = run(logits, all, N, V, V, 0.25f);
  const Result b = run(logits, masked, N, V, V, 0.25f);
  for (int64_t i = 0; i < N; ++i) {
    if (masked[i] < 0) {
      EXPECT_EQ(b.losses[i], 0.0f) << i;
      for (int64_t j = 0; j < V; ++j) ASSERT_EQ(b.grad[i * V + j], 0.0f) << i << "," << j;
    } else {
      EXPECT_EQ(b.losses[i], a.losses[i]) << i;
      for (int64_t j = 0; j < V; ++j) ASSERT_EQ(b.grad[i * V + j], a.grad[i * V + j]) << i << "," << j;
    }
  }
}

TEST_P(XentTest, PaddingColumnsAreIgnoredAndGetZeroGradient) {
  const int64_t N = 4, V = 11, S = 16;
  const VecF logits = random_vec(N * V, 81, -3.0f, 3.0f);
  const std::vector<int32_t> targets = {3, 0, 10, 7};
  // Padded copy: padding holds values that would dominate the max (1e4) or poison the sum (NaN).
  VecF padded(N * S);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < S; ++j)
      padded[i * S + j] = j < V ? logits[i * V + j] : (j % 2 ? 1e4f : std::numeric_limits<float>::quiet_NaN());
  const Result a = run(logits, targets, N, V, V, 0.5f);
  const Result b = run(padded, targets, N, S, V, 0.5f);
  EXPECT_TRUE(same_bits(a.losses, b.losses));
  EXPECT_TRUE(same_bits(a.rowmax, b.rowmax));
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < S; ++j) {
      if (j < V)
        ASSERT_EQ(b.grad[i * S + j], a.grad[i * V + j]) << i << "," << j;
      else
        ASSERT_EQ(b.grad[i * S + j], 0.0f) << i << "," << j;
    }
  EXPECT_TRUE(close(b.losses, ref_xent(to_double(logits), targets, N, V), 1e-6, 1e-6));
}

TEST_P(XentTest, TwoVocabShardsCombineToTheUnshardedResult) {
  // V = 11 split as [0, 6) and [6, 11), each shard padded to stride 8. Between phases the test plays
  // the tensor-parallel group: MAX of the row maxima, SUM of sumexp and target_logit.
  const int64_t N = 5, V = 11, S = 8;
  const int64_t begin[2] = {0, 6}, count[2] = {6, 5};
  const VecF logits = random_vec(N * V, 82, -4.0f, 4.0f);
  const std::vector<int32_t> targets = {0, 5, 6, 10, 3};  // both shards, both sides of the split
  const float scale = 1.0f / N;
  const Result full = run(logits, targets, N, V, V, scale);

  std::vector<std::unique_ptr<Buf>> L, rowmax, sumexp, tl, losses;
  IntBuf T(*k, targets);
  for (int s = 0; s < 2; ++s) {
    VecF shard(N * S, 0.0f);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < count[s]; ++j) shard[i * S + j] = logits[i * V + begin[s] + j];
    L.push_back(std::make_unique<Buf>(*k, shard));
    rowmax.push_back(std::make_unique<Buf>(*k, N));
    sumexp.push_back(std::make_unique<Buf>(*k, N));
    tl.push_back(std::make_unique<Buf>(*k, N));
    losses.push_back(std::make_unique<Buf>(*k, N));
  }
  for (int s = 0; s < 2; ++s) k->xent_row_max(rowmax[s]->get(), L[s]->get(), N, S, count[s]);
  VecF mx = rowmax[0]->host(), m1 = rowmax[1]->host();
  for (int64_t i = 0; i < N; ++i) mx[i] = std::max(mx[i], m1[i]);
  for (int s = 0; s < 2; ++s) {
    rowmax[s]->set(mx);
    k->xent_sumexp_target(sumexp[s]->get(), tl[s]->get(), L[s]->get(), rowmax[s]->get(), T.get(), begin[s], N, S,
                          count[s]);
  }
  VecF se = sumexp[0]->host(), se1 = sumexp[1]->host(), t0 = tl[0]->host(), t1 = tl[1]->host();
  for (int64_t i = 0; i < N; ++i) {
    // Exactly one shard holds each target; the other reports 0.
    const bool in0 = targets[i] < 6;
    EXPECT_EQ(in0 ? t1[i] : t0[i], 0.0f) << i;
    EXPECT_EQ(in0 ? t0[i] : t1[i], logits[i * V + targets[i]]) << i;
    se[i] += se1[i];
    t0[i] += t1[i];
  }
  for (int s = 0; s < 2; ++s) {
    sumexp[s]->set(se);
    tl[s]->set(t0);
    k->xent_loss_grad(losses[s]->get(), L[s]->get(), rowmax[s]->get(), sumexp[s]->get(), tl[s]->get(), T.get(),
                      begin[s], scale, N, S, count[s]);
  }
  const VecF l0 = losses[0]->host();
  EXPECT_TRUE(same_bits(l0, losses[1]->host()));
  // The shards' sumexp is the sum of two float-rounded partials instead of one: ~1e-7 relative.
  EXPECT_TRUE(close(l0, to_double(full.losses), 1e-6, 1e-6));
  VecF joined(N * V);
  for (int s = 0; s < 2; ++s) {
    const VecF g = L[s]->host();
    for (int64_t i = 0; i < N; ++i) {
      for (int64_t j = 0; j < count[s]; ++j) joined[i * V + begin[s] + j] = g[i * S + j];
      for (int64_t j = count[s]; j < S; ++j) ASSERT_EQ(g[i * S + j], 0.0f);
    }
  }
  EXPECT_TRUE(close(joined, to_double(full.grad), 1e-8, 1e-6));
  EXPECT_TRUE(close(joined, fd_xent(logits, targets, N, V, scale), 1e-6, 1e-5));
}

TEST_P(XentTest, LargeLogitsAreStable) {
  // Logits ~1e4: exp(1e4) overflows a float (and a double) without the row max subtracted.
  const int64_t N = 4, V = 9;
  VecF logits = random_vec(N * V, 83, -1e4f, 1e4f);
  for (int64_t j = 0; j < V; ++j) logits[3 * V + j] = 1e4f;  // a flat row: loss = log(V) exactly
  std::vector<int32_t> targets = {0, 0, 4, 2};
  // Row 1 targets its own maximum: loss ~ log(1 + tiny) ~ 0.
  targets[1] = int32_t(std::max_element(logits.begin() + V, logits.begin() + 2 * V) - (logits.begin() + V));
  const Result r = run(logits, targets, N, V, V, 1.0f);
  // Losses up to ~2e4, where one float ulp is ~2e-3.
  EXPECT_TRUE(close(r.losses, ref_xent(to_double(logits), targets, N, V), 4e-3, 1e-6));
  EXPECT_NEAR(r.losses[3], std::log(double(V)), 1e-6);
  EXPECT_NEAR(r.losses[1], 0.0, 1e-6);
  for (int64_t i = 0; i < N; ++i) {
    double s = 0.0;
    for (int64_t j = 0; j < V; ++j) {
      ASSERT_TRUE(std::isfinite(r.grad[i * V + j]));
      s += r.grad[i * V + j];
    }
    EXPECT_NEAR(s, 0.0, 1e-6) << "softmax - onehot sums to 0, row " << i;
  }
  EXPECT_NEAR(r.grad[3 * V + 2], 1.0 / V - 1.0, 1e-6);
}

TEST_P(XentTest, IsDeterministic) {
  const int64_t N = 6, V = 1000, S = 1024;
  const VecF logits = random_vec(N * S, 84, -5.0f, 5.0f);
  const std::vector<int32_t> targets = {1, 999, 500, 0, 7, 123};
  const Result a = run(logits, targets, N, S, V, 0.25f), b = run(logits, targets, N, S, V, 0.25f);
  EXPECT_TRUE(same_bits(a.losses, b.losses));
  EXPECT_TRUE(same_bits(a.grad, b.grad));
  EXPECT_TRUE(same_bits(a.sumexp, b.sumexp));
}

TRIDENT_INSTANTIATE_KERNEL_SUITE(XentTest);

}  // namespace
}  // namespace trident::kt
