#pragma once
// Rotary position embedding (Llama; Hugging Face's rotate-half convention), forward and its transpose,
// both IN PLACE on the q and k heads of a qkv tensor laid out as for attention: each row is
// q [NH,HD] | k [KVH,HD] | v [KVH,HD], so the NH + KVH heads to rotate are the first (NH+KVH)*HD floats
// of the row, contiguous; v is never touched. Row t of a sequence is position t: table[t] holds the
// (cos, sin) pairs of rope_table() for i < HD/2. Rotating the pair (x[i], x[i + HD/2]) by the angle:
//   forward   x[i] <- x[i] c - x[i+HD/2] s,   x[i+HD/2] <- x[i+HD/2] c + x[i] s
//   backward  g[i] <- g[i] c + g[i+HD/2] s,   g[i+HD/2] <- g[i+HD/2] c - g[i] s   (R^T: angle negated)
// One work item per (b, t, head): a plain loop over the HD/2 pairs (contiguous, vectorisable).
#include "kokkos/common.hpp"

namespace trident::kk {

// sign +1: forward, -1: backward (the transpose). Rows [t_begin, t_begin + t_count) of each of B
// sequences of T rows of the [B*T, (NH+2*KVH)*HD] tensor x.
template <class ES>
void rope_apply(const ES& space, float* x, const float* table, int64_t B, int64_t T, int64_t NH, int64_t KVH,
                int64_t HD, int64_t t_begin, int64_t t_count, float sign) {
  const int64_t heads = NH + KVH, row = (NH + 2 * KVH) * HD, half = HD / 2;
  const int64_t per_seq = t_count * heads;
  Kokkos::parallel_for(
      "trident::rope", Range<ES>(space, 0, B * per_seq), KOKKOS_LAMBDA(int64_t w) {
        const int64_t b = w / per_seq, rest = w - b * per_seq;
        const int64_t t = t_begin + rest / heads, head = rest % heads;
        float* __restrict p = x + (b * T + t) * row + head * HD;
        const float* __restrict cs = table + t * half * 2;
        for (int64_t i = 0; i < half; ++i) {
          const float c = cs[2 * i], s = sign * cs[2 * i + 1];
          const float x0 = p[i], x1 = p[i + half];
          p[i] = x0 * c - x1 * s;
          p[i + half] = x1 * c + x0 * s;
        }
      });
}

}  // namespace trident::kk
