#pragma once
// Token (vocab-parallel) and position embeddings, forward and backward side by side.
// Backward is deterministic without atomics: parallel over channels, each channel walks the tokens
// in order, so repeated tokens add up in a fixed order.
#include "kokkos/bf16_storage.hpp"
#include "kokkos/common.hpp"

namespace trident::kk {

KOKKOS_INLINE_FUNCTION float table_value(float x) { return x; }
KOKKOS_INLINE_FUNCTION float table_value(uint16_t bits) { return bf16_value(bits); }

// out[i,:] = wte[tokens[i]-vocab_begin, :] if the token is in this shard, else 0; wte is [V, C] flat, of
// fp32 values or (T = uint16_t) bf16 patterns, widened.
template <class ES, class T>
void embedding_forward(const ES& space, Mat<ES> out, CVec<ES, int32_t> tokens, CVec<ES, T> wte, int64_t V,
                       int64_t vocab_begin) {
  const int64_t C = out.extent(1);
  parallel_rows("trident::embedding_forward", space, out.extent(0), C, KOKKOS_LAMBDA(int64_t i, int64_t c) {
    const int64_t row = int64_t(tokens(i)) - vocab_begin;
    out(i, c) = (row >= 0 && row < V) ? table_value(wte(row * C + c)) : 0.0f;
  });
}

// dwte[tokens[i]-vocab_begin, :] += dout[i, :] for the tokens in this shard.
template <class ES>
void embedding_backward(const ES& space, Mat<ES> dwte, CMat<ES> dout, CVec<ES, int32_t> tokens,
                        int64_t vocab_begin) {
  const int64_t N = dout.extent(0), C = dout.extent(1), V = dwte.extent(0);
  Kokkos::parallel_for(
      "trident::embedding_backward", Range<ES>(space, 0, C), KOKKOS_LAMBDA(int64_t c) {
        for (int64_t i = 0; i < N; ++i) {
          const int64_t row = int64_t(tokens(i)) - vocab_begin;
          if (row >= 0 && row < V) dwte(row, c) += dout(i, c);
        }
      });
}

// out[b,t,:] += wpe[t_begin+t, :]; out viewed as [B*T, C].
template <class ES>
void position_forward(const ES& space, Mat<ES> out, CMat<ES> wpe, int64_t T, int64_t t_begin) {
  parallel_rows("trident::position_forward", space, out.extent(0), out.extent(1),
                KOKKOS_LAMBDA(int64_t i, int64_t c) { out(i, c) += wpe(t_begin + i % T, c); });
}

// dwpe[t_begin+t, :] += sum_b dout[b,t,:], b in order; parallel over (t, c).
template <class ES>
void position_backward(const ES& space, Mat<ES> dwpe, CMat<ES> dout, int64_t B, int64_t T, int64_t t_begin) {
  parallel_rows("trident::position_backward", space, T, dout.extent(1), KOKKOS_LAMBDA(int64_t t, int64_t c) {
    float acc = dwpe(t_begin + t, c);
    for (int64_t b = 0; b < B; ++b) acc += dout(b * T + t, c);
    dwpe(t_begin + t, c) = acc;
  });
}

}  // namespace trident::kk
