#pragma once
// Causal grouped-query self-attention, flash-style: the [T,T] scores exist one kAttentionTile x
// kAttentionTile tile at a time, never whole, and forward hands backward only out and the per-row
// log-sum-exp (lse).
// Forward, per (b,h) and query tile i, over key tiles j <= i (online softmax):
//     S = q_i k_j^T / sqrt(HD);  m' = max(m, rowmax S);  P = exp(S - m');
//     l = l exp(m - m') + rowsum P;  y_i = y_i exp(m - m') + P v_j;   finally y_i /= l, lse = m + log l.
// Backward, per (b,h), key tile j and query tile i >= j, with D = rowsum(dout * out) and lse:
//     P = exp(q_i k_j^T / sqrt(HD) - lse);  dv_j += P^T dy_i;  dP = dy_i v_j^T;  dS = P (dP - D);
//     dq_i += dS k_j / sqrt(HD);  dk_j += dS^T q_i / sqrt(HD).
// Grouped-query: NH query heads, KVH key/value heads (KVH divides NH); query head h reads key/value
// head h / (NH/KVH) in place (no copy per query head). A qkv row is q [NH,HD] | k [KVH,HD] | v [KVH,HD],
// RS = (NH + 2 KVH) HD floats. KVH = NH is multi-head attention and runs exactly the former code.
// Backward visits the query heads in ascending order, so the dk and dv of a key/value head sum its
// group's query heads in that fixed order (the GEMMs accumulate with beta 1 into dqkv).
// The GEMMs read q, k, v, dout and write out, dqkv in place, as strided row-major blocks (a head's
// rows are HD floats every RS or C): cblas_sgemm takes the leading dimension, so no permuted copies
// of the heads are made (KokkosBlas::gemm would need contiguous LayoutRight operands; the copies cost
// ~20% of the step's attention at T = 64). This pins the file to host memory: the Kokkos backend runs
// on host execution spaces only (the GPU has its own backend, kernels/cuda). The row-wise parts
// (masking, exponentials, rescaling) are Kokkos kernels over a tile's rows.
// Tiles are processed one after another in a fixed order and BLAS is deterministic: bit-identical reruns.
// bf16 (the matmul precision BF16, kernels.hpp set_matmul_precision): the caller passes q, k, v and dout
// already rounded (copies), and `dropped` = 16 rounds, as the tensor-core kernels do (cuda/attention_tc.cu),
// the probabilities P before P v (forward; the row sums l use the unrounded P), and P before dv = P^T dy
// and dS before dq and dk (backward; dS from the unrounded P). Only the query and key tiles differ from
// the GPU's (128 here, 64 there), and with them the running max a forward tile rounds P against.
#include <cblas.h>

#include "kokkos/common.hpp"
#include "kokkos/matmul.hpp"

namespace trident::kk {

// Query rows and keys per tile. 128 x 128 floats (64 KiB) stay in L2 between the GEMM that writes a
// tile and the ones that read it; 128 rows keep the sgemm calls large enough to run near peak.
// Query and key tiles have the same size and start on multiples of it, so the diagonal tile of
// query tile i is key tile i, and key tiles j < i are entirely visible to every row of tile i.
constexpr int64_t kAttentionTile = 128;

// Workspace floats needed by attention_forward / attention_backward: O(tile^2), and D per row.
inline int64_t attention_forward_workspace(int64_t, int64_t, int64_t, int64_t) {
  // One score tile; running max (float) and running sum (double = 2 floats) per query row.
  return kAttentionTile * kAttentionTile + 3 * kAttentionTile;
}
inline int64_t attention_backward_workspace(int64_t B, int64_t T, int64_t NH, int64_t) {
  // The P and dP tiles; D per row.
  return 2 * kAttentionTile * kAttentionTile + B * NH * T;
}

namespace detail {

// A row-major block in host memory: rows x cols, row r at p + r*ld.
struct Block {
  float* p;
  int64_t rows, cols, ld;
};
struct CBlock {
  const float* p;
  int64_t rows, cols, ld;
};

// C = alpha op(A) op(B) + beta C (op = transpose when the flag is set). beta 0 never reads C.
inline void sgemm(bool trans_a, bool trans_b, float alpha, CBlock A, CBlock B, float beta, Block C) {
  const int64_t K = trans_a ? A.rows : A.cols;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              int(C.rows), int(C.cols), int(K), alpha, A.p, int(A.ld), B.p, int(B.ld), beta, C.p, int(C.ld));
}

// Number of keys of the tile starting at key j0 (nk of them) that query t may see: t - j0 + 1,
// capped at nk. At least 1 here, since j0 <= the first query of the tile <= t.
KOKKOS_INLINE_FUNCTION int64_t visible_keys(int64_t t, int64_t j0, int64_t nk) {
  return t - j0 + 1 < nk ? t - j0 + 1 : nk;
}

// One online-softmax step over the score tile S [nq,nk] of query rows i0.. and keys j0..:
// S is replaced by P = exp(S - m_new) (0 where masked), the running max m and sum l and the output
// rows O are updated. `first`: the first key tile of these rows (m, l, O hold nothing yet; O is then
// written by the following GEMM with beta 0, so it is not touched here).
// The row sum is accumulated in double: l sums up to T terms (the interface's rule for long
// reductions). O and l are rescaled by the same float factor, so its rounding cancels in O / l.
// dropped > 0: P is stored rounded to its top 32 - dropped bits (after its row sum took the unrounded value).
template <class ES>
void online_softmax_step(const ES& space, Block S, Block O, float* m, double* l, int64_t i0, int64_t j0,
                         bool first, int dropped) {
  Kokkos::parallel_for(
      "trident::attention_online_softmax", Range<ES>(space, 0, S.rows), KOKKOS_LAMBDA(int64_t r) {
        float* __restrict s = S.p + r * S.ld;
        const int64_t n = visible_keys(i0 + r, j0, S.cols);
        float tile_max = s[0];
        for (int64_t c = 1; c < n; ++c) tile_max = s[c] > tile_max ? s[c] : tile_max;
        const float m_new = first || tile_max > m[r] ? tile_max : m[r];
        double sum = 0.0;
        for (int64_t c = 0; c < n; ++c) {
          s[c] = kmath::exp(s[c] - m_new);
          sum += s[c];
          if (dropped) s[c] = round_mantissa(s[c], dropped);
        }
        for (int64_t c = n; c < S.cols; ++c) s[c] = 0.0f;
        if (first) {
          l[r] = sum;
        } else {
          const float alpha = kmath::exp(m[r] - m_new);  // 1 when the max did not move
          l[r] = l[r] * alpha + sum;
          float* __restrict o = O.p + r * O.ld;
          if (alpha != 1.0f)
            for (int64_t d = 0; d < O.cols; ++d) o[d] *= alpha;
        }
        m[r] = m_new;
      });
  space.fence();
}

template <class ES>
constexpr void require_host_memory() {
  static_assert(Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename ES::memory_space>::accessible,
                "the Kokkos attention calls cblas on its operands: host execution spaces only");
}

}  // namespace detail

// out [B,q_count,C] = attention of the query rows [q_begin, q_begin + q_count) of each sequence of qkv
// [B,T,RS] (row t sees keys 0..t; rows past q_begin + q_count are never read); lse [B,NH,T] gets those
// rows' log-sum-exp unless null. ws: attention_forward_workspace floats. Query tiles stay aligned to
// multiples of the tile and are clipped to the rows asked for, so every clipped row t of tile i0 sees at
// least one key of each key tile j0 <= i0. dropped: bits P drops before P v (0: none).
template <class ES>
void attention_forward_rows(const ES& space, float* out, float* lse, const float* qkv, Vec<ES> ws, int64_t B,
                            int64_t T, int64_t NH, int64_t KVH, int64_t HD, int64_t q_begin, int64_t q_count,
                            int dropped = 0) {
  detail::require_host_memory<ES>();
  using detail::Block;
  using detail::CBlock;
  constexpr int64_t tile = kAttentionTile;
  const int64_t C = NH * HD, RS = (NH + 2 * KVH) * HD, group = NH / KVH, q_end = q_begin + q_count;
  float* scores = ws.data();
  float* m = scores + tile * tile;
  double* l = reinterpret_cast<double*>(m + tile);  // tile^2 + tile floats in: 8-byte aligned
  const float scale = float(1.0 / kmath::sqrt(double(HD)));
  space.fence();  // qkv may still be being written by queued kernels
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t i0 = q_begin - q_begin % tile; i0 < q_end; i0 += tile) {
        const int64_t r0 = i0 > q_begin ? i0 : q_begin;  // first row of the clipped query tile
        const int64_t nq = (i0 + tile < q_end ? i0 + tile : q_end) - r0;
        const CBlock qi{qkv + (b * T + r0) * RS + h * HD, nq, HD, RS};
        const Block yi{out + (b * q_count + r0 - q_begin) * C + h * HD, nq, HD, C};
        for (int64_t j0 = 0; j0 <= i0; j0 += tile) {  // key tiles up to and including the diagonal
          const int64_t nk = (j0 + tile < r0 + nq ? j0 + tile : r0 + nq) - j0;
          const float* kj = qkv + (b * T + j0) * RS + (NH + h / group) * HD;  // v_j at kj + KVH*HD
          const Block s{scores, nq, nk, nk};
          detail::sgemm(false, true, scale, qi, CBlock{kj, nk, HD, RS}, 0.0f, s);
          detail::online_softmax_step(space, s, yi, m, l, r0, j0, j0 == 0, dropped);
          detail::sgemm(false, false, 1.0f, CBlock{s.p, nq, nk, nk}, CBlock{kj + KVH * HD, nk, HD, RS},
                        j0 == 0 ? 0.0f : 1.0f, yi);
        }
        float* lse_i = lse ? lse + (b * NH + h) * T + r0 : nullptr;
        Kokkos::parallel_for(
            "trident::attention_normalise", Range<ES>(space, 0, nq), KOKKOS_LAMBDA(int64_t r) {
              const float inv = float(1.0 / l[r]);
              float* __restrict y = yi.p + r * yi.ld;
              for (int64_t d = 0; d < HD; ++d) y[d] *= inv;
              if (lse_i) lse_i[r] = float(double(m[r]) + kmath::log(l[r]));
            });
        space.fence();
      }
}

// out [B,T,C] = attention of qkv [B,T,RS]; lse [B,NH,T]. ws: attention_forward_workspace floats.
template <class ES>
void attention_forward(const ES& space, Vec<ES> out, Vec<ES> lse, CVec<ES> qkv, Vec<ES> ws, int64_t B,
                       int64_t T, int64_t NH, int64_t KVH, int64_t HD, int dropped = 0) {
  attention_forward_rows(space, out.data(), lse.data(), qkv.data(), ws, B, T, NH, KVH, HD, 0, T, dropped);
}

// dqkv [B,T,RS] += the gradient through attention_forward, from its out and lse.
// ws: attention_backward_workspace floats. dropped: bits P and dS drop before their GEMMs (0: none).
template <class ES>
void attention_backward(const ES& space, Vec<ES> dqkv, CVec<ES> dout, CVec<ES> qkv, CVec<ES> out,
                        CVec<ES> lse, Vec<ES> ws, int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HD,
                        int dropped = 0) {
  detail::require_host_memory<ES>();
  using detail::Block;
  using detail::CBlock;
  constexpr int64_t tile = kAttentionTile;
  const int64_t C = NH * HD, RS = (NH + 2 * KVH) * HD, group = NH / KVH;
  float* p_tile = ws.data();
  float* dp_tile = p_tile + tile * tile;
  float* D = dp_tile + tile * tile;  // [B,NH,T], like lse
  // D[b,h,t] = sum_d dout * out over the head's HD features, in double.
  Kokkos::parallel_for(
      "trident::attention_dout_dot_out", Range<ES>(space, 0, B * NH * T), KOKKOS_LAMBDA(int64_t r) {
        const int64_t t = r % T, h = (r / T) % NH, b = r / (T * NH);
        const int64_t o = (b * T + t) * C + h * HD;
        double s = 0.0;
        for (int64_t d = 0; d < HD; ++d) s += double(dout(o + d)) * double(out(o + d));
        D[r] = float(s);
      });
  space.fence();

  const float scale = float(1.0 / kmath::sqrt(double(HD)));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h) {  // ascending: the fixed order of a key/value head's group
      const float* lse_h = lse.data() + (b * NH + h) * T;
      const float* D_h = D + (b * NH + h) * T;
      for (int64_t j0 = 0; j0 < T; j0 += tile) {
        const int64_t nk = (j0 + tile < T ? j0 + tile : T) - j0;
        const int64_t ko = (b * T + j0) * RS + (NH + h / group) * HD;  // offset of k_j in (d)qkv
        const int64_t vo = ko + KVH * HD;                                 // and of v_j
        const CBlock kj{qkv.data() + ko, nk, HD, RS}, vj{qkv.data() + vo, nk, HD, RS};
        const Block dkj{dqkv.data() + ko, nk, HD, RS}, dvj{dqkv.data() + vo, nk, HD, RS};
        for (int64_t i0 = j0; i0 < T; i0 += tile) {  // query tiles on and below the diagonal
          const int64_t nq = (i0 + tile < T ? i0 + tile : T) - i0;
          const int64_t qo = (b * T + i0) * RS + h * HD;
          const CBlock qi{qkv.data() + qo, nq, HD, RS}, dyi{dout.data() + (b * T + i0) * C + h * HD, nq, HD, C};
          const Block dqi{dqkv.data() + qo, nq, HD, RS};
          const Block P{p_tile, nq, nk, nk}, dP{dp_tile, nq, nk, nk};
          detail::sgemm(false, true, scale, qi, kj, 0.0f, P);
          Kokkos::parallel_for(
              "trident::attention_recompute_p", Range<ES>(space, 0, nq), KOKKOS_LAMBDA(int64_t r) {
                float* __restrict p = P.p + r * nk;
                const int64_t n = detail::visible_keys(i0 + r, j0, nk);
                const float lse_r = lse_h[i0 + r];
                for (int64_t c = 0; c < n; ++c) p[c] = kmath::exp(p[c] - lse_r);
                for (int64_t c = n; c < nk; ++c) p[c] = 0.0f;
              });
          space.fence();
          detail::sgemm(false, true, 1.0f, dyi, vj, 0.0f, dP);
          Kokkos::parallel_for(
              "trident::attention_softmax_backward", Range<ES>(space, 0, nq), KOKKOS_LAMBDA(int64_t r) {
                float* __restrict ds = dP.p + r * nk;
                float* __restrict p = P.p + r * nk;
                const float d_r = D_h[i0 + r];
                for (int64_t c = 0; c < nk; ++c) ds[c] = p[c] * (ds[c] - d_r);  // masked: P = 0 -> dS = 0
                if (dropped)
                  for (int64_t c = 0; c < nk; ++c) {
                    ds[c] = round_mantissa(ds[c], dropped);
                    p[c] = round_mantissa(p[c], dropped);
                  }
              });
          space.fence();
          detail::sgemm(true, false, 1.0f, CBlock{P.p, nq, nk, nk}, dyi, 1.0f, dvj);
          const CBlock dS{dP.p, nq, nk, nk};
          detail::sgemm(false, false, scale, dS, kj, 1.0f, dqi);
          detail::sgemm(true, false, scale, dS, qi, 1.0f, dkj);
        }
      }
    }
}

}  // namespace trident::kk
