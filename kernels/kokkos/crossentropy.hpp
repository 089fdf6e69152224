#pragma once
// Fused softmax cross-entropy over a (possibly vocab-parallel) logits shard, in the three phases of
// kernels.hpp so a tensor-parallel group can all-reduce between them (MAX after 1, SUM after 2).
// logits is [N, stride]; only the first vocab_count columns are vocabulary, the rest is padding that
// never enters the softmax and receives a 0 gradient. Row sums and the loss are done in double.
#include "kokkos/common.hpp"

namespace trident::kk {

// 1. rowmax[i] = max_{j < vocab_count} logits[i,j]
template <class ES>
void xent_row_max(const ES& space, Vec<ES> rowmax, CMat<ES> logits, int64_t vocab_count) {
  Kokkos::parallel_for(
      "trident::xent_row_max", Range<ES>(space, 0, logits.extent(0)), KOKKOS_LAMBDA(int64_t i) {
        float m = -HUGE_VALF;
        for (int64_t j = 0; j < vocab_count; ++j) m = logits(i, j) > m ? logits(i, j) : m;
        rowmax(i) = m;
      });
}

// 2. sumexp[i] = sum_j exp(logits[i,j] - rowmax[i]) (double accumulator, j in order);
//    target_logit[i] = logits[i, targets[i]-vocab_begin] when the target is in this shard, else 0.
template <class ES>
void xent_sumexp_target(const ES& space, Vec<ES> sumexp, Vec<ES> target_logit, CMat<ES> logits,
                        CVec<ES> rowmax, CVec<ES, int32_t> targets, int64_t vocab_begin, int64_t vocab_count) {
  Kokkos::parallel_for(
      "trident::xent_sumexp_target", Range<ES>(space, 0, logits.extent(0)), KOKKOS_LAMBDA(int64_t i) {
        const float m = rowmax(i);
        double s = 0.0;
        for (int64_t j = 0; j < vocab_count; ++j) s += kmath::exp(logits(i, j) - m);
        sumexp(i) = float(s);
        const int64_t t = int64_t(targets(i)) - vocab_begin;
        target_logit(i) = (t >= 0 && t < vocab_count) ? logits(i, t) : 0.0f;
      });
}

// 3. losses[i] = log(sumexp[i]) + rowmax[i] - target_logit[i];
//    logits[i,j] = dloss_scale * (softmax[i,j] - [j == target]) in place, padding columns = 0.
//    A row whose target is negative is not scored: loss 0, gradient 0.
template <class ES>
void xent_loss_grad(const ES& space, Vec<ES> losses, Mat<ES> logits, CVec<ES> rowmax, CVec<ES> sumexp,
                    CVec<ES> target_logit, CVec<ES, int32_t> targets, int64_t vocab_begin,
                    float dloss_scale, int64_t vocab_count) {
  const int64_t N = logits.extent(0), stride = logits.extent(1);
  Kokkos::parallel_for(
      "trident::xent_loss", Range<ES>(space, 0, N), KOKKOS_LAMBDA(int64_t i) {
        losses(i) = targets(i) < 0
                        ? 0.0f
                        : float(kmath::log(double(sumexp(i))) + double(rowmax(i)) - double(target_logit(i)));
      });
  parallel_rows("trident::xent_grad", space, N, stride, KOKKOS_LAMBDA(int64_t i, int64_t j) {
    if (j >= vocab_count || targets(i) < 0) {
      logits(i, j) = 0.0f;
      return;
    }
    const float p = kmath::exp(logits(i, j) - rowmax(i)) / sumexp(i);
    const float onehot = (int64_t(targets(i)) - vocab_begin == j) ? 1.0f : 0.0f;
    logits(i, j) = dloss_scale * (p - onehot);
  });
}

}  // namespace trident::kk
