#pragma once
// Causal multi-head self-attention, llm.c style, forward and backward side by side.
//   qkv [B,T,3,NH,HD] is permuted into contiguous q, k, v [B,NH,T,HD] buffers (workspace), so each
//   (b,h) slice is a contiguous LayoutRight [T,HD] matrix and every product is one sgemm:
//     att = softmax_causal(q k^T / sqrt(HD))   [T,T]  (entries above the diagonal are 0)
//     y   = att v                              [T,HD] -> unpermuted into out [B,T,NH,HD]
//   Backward recomputes the permutation (the workspace may have served other layers since):
//     datt = dy v^T, dv = att^T dy, dpre = att * (datt - rowsum(att*datt)), dq = dpre k / sqrt(HD),
//     dk = dpre^T q / sqrt(HD); then dq, dk, dv are added into dqkv.
#include <type_traits>

#include "kokkos/common.hpp"
#include "kokkos/matmul.hpp"

namespace trident::kk {

// The [T,X] slice (b,h) of a [B,NH,T,X] tensor. It must stay LayoutRight (contiguous rows) so that
// KokkosBlas::gemm uses sgemm; checked at compile time.
template <class V>
auto head_slice(const V& v, int64_t b, int64_t h) {
  auto s = Kokkos::subview(v, b, h, Kokkos::ALL, Kokkos::ALL);
  static_assert(std::is_same<typename decltype(s)::array_layout, Kokkos::LayoutRight>::value,
                "a (b,h) slice of a LayoutRight [B,NH,T,X] view must be LayoutRight");
  return s;
}

// Workspace floats needed by attention_forward / attention_backward.
inline int64_t attention_forward_workspace(int64_t B, int64_t T, int64_t NH, int64_t HD) {
  return 4 * B * NH * T * HD;
}
inline int64_t attention_backward_workspace(int64_t B, int64_t T, int64_t NH, int64_t HD) {
  return 7 * B * NH * T * HD + B * NH * T * T;
}

namespace detail {

// dst[b,h,t,:] = src[b,t,part*C + h*HD : ...] for `part` of a [B,T,parts*C] tensor; a team per row.
template <class ES>
void permute_heads(const ES& space, Ten4<ES> dst, CVec<ES> src, int64_t parts, int64_t part) {
  const int64_t NH = dst.extent(1), T = dst.extent(2), HD = dst.extent(3);
  const int64_t C = NH * HD;
  parallel_rows("trident::attention_permute", space, dst.extent(0) * NH * T, HD,
                KOKKOS_LAMBDA(int64_t r, int64_t d) {
                  const int64_t t = r % T, h = (r / T) % NH, b = r / (T * NH);
                  dst(b, h, t, d) = src((b * T + t) * parts * C + part * C + h * HD + d);
                });
}

// dst[b,t,part*C + h*HD + d] (+)= src[b,h,t,d]; accumulate selects += (backward) or = (forward).
template <class ES>
void unpermute_heads(const ES& space, Vec<ES> dst, CTen4<ES> src, int64_t parts, int64_t part,
                     bool accumulate) {
  const int64_t NH = src.extent(1), T = src.extent(2), HD = src.extent(3);
  const int64_t C = NH * HD;
  parallel_rows("trident::attention_unpermute", space, src.extent(0) * NH * T, HD,
                KOKKOS_LAMBDA(int64_t r, int64_t d) {
                  const int64_t t = r % T, h = (r / T) % NH, b = r / (T * NH);
                  const int64_t o = (b * T + t) * parts * C + part * C + h * HD + d;
                  if (accumulate)
                    dst(o) += src(b, h, t, d);
                  else
                    dst(o) = src(b, h, t, d);
                });
}

}  // namespace detail

// ws: attention_forward_workspace(B,T,NH,HD) floats. att: [B,NH,T,T].
template <class ES>
void attention_forward(const ES& space, Vec<ES> out, Ten4<ES> att, CVec<ES> qkv, Vec<ES> ws, int64_t B,
                       int64_t T, int64_t NH, int64_t HD) {
  const int64_t S = B * NH * T * HD;
  Ten4<ES> q(ws.data(), B, NH, T, HD), k(ws.data() + S, B, NH, T, HD), v(ws.data() + 2 * S, B, NH, T, HD),
      y(ws.data() + 3 * S, B, NH, T, HD);
  detail::permute_heads(space, q, qkv, 3, 0);
  detail::permute_heads(space, k, qkv, 3, 1);
  detail::permute_heads(space, v, qkv, 3, 2);
  space.fence();  // the host-driven GEMMs below read q, k, v

  const float scale = float(1.0 / kmath::sqrt(double(HD)));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      gemm("N", "T", scale, head_slice(q, b, h), head_slice(k, b, h), 0.0f, head_slice(att, b, h));

  // Causal, numerically stable softmax per row: row max over j <= t subtracted, sum in double,
  // entries above the diagonal set to 0.
  Kokkos::parallel_for(
      "trident::attention_softmax", Range<ES>(space, 0, B * NH * T), KOKKOS_LAMBDA(int64_t r) {
        const int64_t t = r % T, h = (r / T) % NH, b = r / (T * NH);
        float m = att(b, h, t, 0);
        for (int64_t j = 1; j <= t; ++j) m = att(b, h, t, j) > m ? att(b, h, t, j) : m;
        double sum = 0.0;
        for (int64_t j = 0; j <= t; ++j) {
          const float e = kmath::exp(att(b, h, t, j) - m);
          att(b, h, t, j) = e;
          sum += e;
        }
        const double inv = 1.0 / sum;
        for (int64_t j = 0; j <= t; ++j) att(b, h, t, j) = float(att(b, h, t, j) * inv);
        for (int64_t j = t + 1; j < T; ++j) att(b, h, t, j) = 0.0f;
      });
  space.fence();

  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      gemm("N", "N", 1.0f, head_slice(att, b, h), head_slice(v, b, h), 0.0f, head_slice(y, b, h));
  detail::unpermute_heads(space, out, CTen4<ES>(y), 1, 0, false);
}

// ws: attention_backward_workspace(B,T,NH,HD) floats. dqkv [B,T,3C] is accumulated into.
template <class ES>
void attention_backward(const ES& space, Vec<ES> dqkv, CVec<ES> dout, CVec<ES> qkv, CTen4<ES> att,
                        Vec<ES> ws, int64_t B, int64_t T, int64_t NH, int64_t HD) {
  const int64_t S = B * NH * T * HD;
  float* w = ws.data();
  Ten4<ES> q(w, B, NH, T, HD), k(w + S, B, NH, T, HD), v(w + 2 * S, B, NH, T, HD),
      dy(w + 3 * S, B, NH, T, HD), dq(w + 4 * S, B, NH, T, HD), dk(w + 5 * S, B, NH, T, HD),
      dv(w + 6 * S, B, NH, T, HD), datt(w + 7 * S, B, NH, T, T);
  detail::permute_heads(space, q, qkv, 3, 0);
  detail::permute_heads(space, k, qkv, 3, 1);
  detail::permute_heads(space, v, qkv, 3, 2);
  detail::permute_heads(space, dy, dout, 1, 0);
  space.fence();

  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h) {
      gemm("N", "T", 1.0f, head_slice(dy, b, h), head_slice(v, b, h), 0.0f, head_slice(datt, b, h));
      gemm("T", "N", 1.0f, head_slice(att, b, h), head_slice(dy, b, h), 0.0f, head_slice(dv, b, h));
    }

  // Softmax backward in place in datt: dpre[t,j] = att[t,j] (datt[t,j] - sum_k att[t,k] datt[t,k]),
  // j <= t; 0 above the diagonal (masked logits get no gradient).
  Kokkos::parallel_for(
      "trident::attention_softmax_backward", Range<ES>(space, 0, B * NH * T), KOKKOS_LAMBDA(int64_t r) {
        const int64_t t = r % T, h = (r / T) % NH, b = r / (T * NH);
        double dot = 0.0;
        for (int64_t j = 0; j <= t; ++j) dot += double(att(b, h, t, j)) * double(datt(b, h, t, j));
        for (int64_t j = 0; j <= t; ++j)
          datt(b, h, t, j) = float(double(att(b, h, t, j)) * (double(datt(b, h, t, j)) - dot));
        for (int64_t j = t + 1; j < T; ++j) datt(b, h, t, j) = 0.0f;
      });
  space.fence();

  const float scale = float(1.0 / kmath::sqrt(double(HD)));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h) {
      gemm("N", "N", scale, head_slice(datt, b, h), head_slice(k, b, h), 0.0f, head_slice(dq, b, h));
      gemm("T", "N", scale, head_slice(datt, b, h), head_slice(q, b, h), 0.0f, head_slice(dk, b, h));
    }
  detail::unpermute_heads(space, dqkv, CTen4<ES>(dq), 3, 0, true);
  detail::unpermute_heads(space, dqkv, CTen4<ES>(dk), 3, 1, true);
  detail::unpermute_heads(space, dqkv, CTen4<ES>(dv), 3, 2, true);
}

}  // namespace trident::kk
