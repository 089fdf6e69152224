// Causal grouped-query self-attention on tensor cores: PTX mma.sync m16n8k16 with bf16 operands and
// fp32 accumulators (cuda/mma.cuh), forward and backward side by side, in the manner of FlashAttention-2:
// a warp keeps its products in registers and does the softmax on them there (the fragments' layout is
// documented), so scores and probabilities never go through shared memory. Used by the Kernels when the
// matmul precision is BF16 and the head size is 64 or 128 (cuda_kernels.cu); other head sizes, the other
// precisions and attention_forward_rows (incremental decoding) run attention.cu's fp32 kernels. Same
// contract and layout as attention.cu (qkv [B,T,(NH+2KVH)HD], out [B,T,NH HD], lse [B,NH,T], query head
// h reads key/value head h/(NH/KVH), backward accumulates into dqkv), storage fp32 throughout.
//
// What is rounded to bf16 (to nearest even), everything else fp32 (kernels.hpp, set_matmul_precision):
//   forward  q, k, v as they are loaded into shared memory; S = q k^T (fp32 accumulation), s = S scale;
//            online softmax in fp32 (running max m and sum l of the unrounded P = exp(s - m));
//            P rounded before P v; out = acc / l, lse = m + log l.
//   backward q, k, v, dout as loaded; D = sum_d bf16(dout) out in double; P = exp(s - lse) in fp32;
//            dP = dout v^T; dS = P (dP - D); dS rounded before dQ = dS k and dK = dS^T q (both times
//            scale, in fp32, at the end); P rounded before dV = P^T dout.
// Blocks of 4 warps work on tiles of kTile = 64 rows (queries or keys), zero-padded past T, loaded into
// shared memory as bf16 rows of HD, padded by 16 bytes so that each 8 rows an ldmatrix reads hit 32
// different banks; every fragment comes from one ldmatrix, and where a tile is a B operand whose k index
// runs down its rows (v in P v, q and dout in dK and dV, k in dQ) ldmatrix.trans transposes its blocks.
// Warp w owns the tile's 16 rows [16w, 16w + 16):
//   forward   block = (b, h, query tile): loop over key tiles up to the diagonal; S (16 x 64) in registers,
//             online softmax on it, P re-packed into A fragments, out (16 x HD) accumulated in registers.
//   dK/dV     block = (b, kv head, key tile): loop over the group's query heads in ascending order and,
//             for each, over query tiles from the diagonal to T in halves of 32 queries; S^T = K Q^T and
//             dP^T = V dO^T, then dV += P^T dO and dK += dS^T Q, all in registers.
//   dQ        block = (b, h, query tile): loop over key tiles up to the diagonal in halves of 32 keys;
//             S = Q K^T, dP = dO V^T, dQ += dS K in registers.
// Blocks of 8 keys or queries that the causal mask hides from all 16 rows of a warp are skipped.
// Determinism: every output element has one owner (a lane's registers, then its += into dqkv, or its = when
// dqkv is written: attention_backward_overwrite), every loop
// has a fixed order, there are no atomics: reruns are bit-identical.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <utility>

#include "cuda/allocator.cuh"
#include "cuda/check.cuh"
#include "cuda/mma.cuh"
#include "cuda/ops.cuh"
#include "cuda/reduce.cuh"
#include "kernel_checks.hpp"

// The block's dynamically sized shared memory, 128-byte aligned (gpu-sim's spelling, or nvcc's).
#if defined(GPUSIM_DYNAMIC_SHARED)
#define TRIDENT_TC_SHARED(name) GPUSIM_DYNAMIC_SHARED(unsigned char, name)
#else
#define TRIDENT_TC_SHARED(name) extern __shared__ __align__(128) unsigned char name[]
#endif

namespace trident::cuda {

namespace {

using bf16 = __nv_bfloat16;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kTile = 64;      // query rows or keys per tile
constexpr int kWarpRows = 16;  // a warp's rows of a tile: the mma's M
constexpr int kHalf = 32;      // backward: queries (dK/dV) or keys (dQ) per inner step
static_assert(kTile == kWarps * kWarpRows, "each warp owns one 16-row strip of a tile");

// Row stride (elements) and byte sizes of the shared-memory tiles. 8 elements (16 bytes) of padding per
// row: a row is then 4 banks past the one above it modulo 32, so ldmatrix's 8 rows of 4 words (16 bytes)
// hit 32 different banks.
template <int HD>
struct TileShapes {
  static constexpr int kLd = HD + 8;
  static constexpr size_t kTileBytes = size_t(kTile) * kLd * sizeof(bf16);
  static constexpr size_t kStatBytes = size_t(kTile) * sizeof(float);  // one statistic per row
  static constexpr size_t kForwardBytes = 3 * kTileBytes;                      // q, k, v
  static constexpr size_t kBackwardKvBytes = 4 * kTileBytes + 2 * kStatBytes;  // k, v, q, dout; lse, D
  static constexpr size_t kBackwardQBytes = 4 * kTileBytes;                    // q, dout, k, v
  static_assert(kTileBytes % 128 == 0 && kStatBytes % 128 == 0, "tiles keep the next one 128-byte aligned");
};

// Hands out consecutive pieces of the block's shared memory.
struct SharedCursor {
  unsigned char* next;
  template <class T>
  __device__ T* take(size_t bytes) {
    T* p = reinterpret_cast<T*>(next);
    next += bytes;
    return p;
  }
};

// tile[j][d..d+3] <- x rounded to bf16 (one 8-byte store).
template <int HD>
__device__ void store_rounded4(bf16* tile, int j, int d, float4 x) {
  bf16* o = tile + j * TileShapes<HD>::kLd + d;  // 8-byte aligned: d is a multiple of 4
#if defined(__CUDACC__)
  *reinterpret_cast<uint2*>(o) = make_uint2(pack_bf16x2(x.x, x.y), pack_bf16x2(x.z, x.w));
#else
  const uint32_t packed[2] = {pack_bf16x2(x.x, x.y), pack_bf16x2(x.z, x.w)};
  std::memcpy(static_cast<void*>(o), packed, sizeof packed);
#endif
}

// tile[j][d] <- bf16(src[(row0 + j) stride + d]) for j < kTile, d < HD (row stride kLd); rows at or past
// T are zero. Cooperative over the block (kThreads), consecutive threads on consecutive d (coalesced).
// With `vec` (src and stride 16-byte aligned: the launchers check) each thread issues all its 16-byte
// loads, 8 at HD 64 and 16 at HD 128, before it converts the first: the tile costs one memory round trip.
template <int HD>
__device__ void load_rounded_tile(bf16* tile, const float* src, int64_t stride, int row0, int T, bool vec) {
  constexpr int kVecsPerRow = HD / 4, kPerThread = kTile * kVecsPerRow / kThreads;
  static_assert(kTile * kVecsPerRow % kThreads == 0, "every thread loads the same number of vectors");
  if (vec) {
    float4 v[kPerThread];
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int q = i * kThreads + int(threadIdx.x), j = q / kVecsPerRow, t = row0 + j;
      const int d = (q - j * kVecsPerRow) * 4;
      // Rows past T load row T - 1 and drop it: no branch keeps the loads apart.
      const float4 x = *reinterpret_cast<const float4*>(src + int64_t(t < T ? t : T - 1) * stride + d);
      v[i] = t < T ? x : make_float4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int q = i * kThreads + int(threadIdx.x), j = q / kVecsPerRow;
      store_rounded4<HD>(tile, j, (q - j * kVecsPerRow) * 4, v[i]);
    }
    return;
  }
  for (int q = threadIdx.x; q < kTile * kVecsPerRow; q += kThreads) {
    const int j = q / kVecsPerRow, d = (q - j * kVecsPerRow) * 4, t = row0 + j;
    const float* s = src + int64_t(t) * stride + d;
    store_rounded4<HD>(tile, j, d, t < T ? make_float4(s[0], s[1], s[2], s[3]) : make_float4(0, 0, 0, 0));
  }
}

// row[j] <- src[row0 + j], 0 past T.
__device__ void load_row_statistic(float* row, const float* src, int row0, int T) {
  for (int j = threadIdx.x; j < kTile; j += blockDim.x) row[j] = row0 + j < T ? src[row0 + j] : 0.0f;
}

// Blocks of 8 columns starting at c0 that some of the rows [first_row, first_row + 16) can see (causal:
// column <= row), 0..n_max.
__device__ int visible_blocks8(int first_row, int c0, int n_max) {
  const int n = (first_row + kWarpRows - c0 + 7) / 8;
  return n < 0 ? 0 : (n > n_max ? n_max : n);
}

// The lane's place in its fragments (cuda/mma.cuh): rows g and g + 8, columns 2t and 2t + 1 of each
// 8-column block.
struct LanePlace {
  int g, t;
  __device__ LanePlace() : g(int(threadIdx.x) % 32 / 4), t(int(threadIdx.x) % 4) {}
  __device__ int row(int i) const { return g + (i >= 2 ? 8 : 0); }  // of accumulator element i
  __device__ int col(int n, int i) const { return 8 * n + 2 * t + (i & 1); }
};

// max and sum over the 4 lanes of a group (the lanes that hold one row's columns).
__device__ float group_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ float group_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// acc[n] = A B_n for n < n_blocks (the others zero): A the 16 rows of HD at a (row stride lda), B_n^T the
// 8 rows of HD at b + 8 n ldb (B fragments loaded two blocks at a time). The k order is fixed: ascending.
template <int HD, int N>
__device__ void warp_scores(float (&acc)[N][4], const bf16* a, int lda, const bf16* b, int ldb, int n_blocks) {
  static_assert(N % 2 == 0, "B fragments come in pairs");
#pragma unroll
  for (int n = 0; n < N; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[n][i] = 0.0f;
#pragma unroll
  for (int k = 0; k < HD / 16; ++k) {
    MmaA fa;
    load_a_fragment(fa, a + k * 16, lda);
#pragma unroll
    for (int n = 0; n < N; n += 2) {
      if (n >= n_blocks) break;
      MmaB left, right;
      load_b_fragment_pair_of_transpose(left, right, b + n * 8 * ldb + k * 16, ldb);
      mma_bf16(acc[n], fa, left);
      if (n + 1 < n_blocks) mma_bf16(acc[n + 1], fa, right);
    }
  }
}

// out += P V for the warp's 16 rows: P the accumulators p (N blocks of 8 columns: the k index), rounded
// to bf16 here; V the tile rows at v (row k, HD values, row stride ldv). Only the first k_blocks blocks
// of 8 of P can be nonzero (the rest are skipped).
template <int HD, int N>
__device__ void warp_accumulate(float (&out)[HD / 8][4], const float (&p)[N][4], const bf16* v, int ldv,
                                int k_blocks) {
#pragma unroll
  for (int kk = 0; kk < N / 2; ++kk) {
    if (2 * kk >= k_blocks) break;
    MmaA fa;
    to_a_fragment(fa, p[2 * kk], p[2 * kk + 1]);
#pragma unroll
    for (int d = 0; d < HD / 8; d += 2) {
      MmaB left, right;
      load_b_fragment_pair(left, right, v + kk * 16 * ldv + d * 8, ldv);
      mma_bf16(out[d], fa, left);
      mma_bf16(out[d + 1], fa, right);
    }
  }
}

// dst[r * ld + c] += acc[c / 8][...] * scale for the warp's rows r (relative to dst) that are below
// `rows`: each element of the warp's 16 x HD strip has one owner, the lane that holds it.
template <int HD>
__device__ void warp_add_strip(float* dst, int64_t ld, int rows, const float (&acc)[HD / 8][4], float scale,
                               GradWrite write) {
  const LanePlace at;
#pragma unroll
  for (int d = 0; d < HD / 8; ++d)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      if (at.row(i) < rows) {
        float& o = dst[at.row(i) * ld + at.col(d, i)];
        o = write == GradWrite::Overwrite ? acc[d][i] * scale : o + acc[d][i] * scale;
      }
}

template <int HD>
__device__ void zero(float (&acc)[HD / 8][4]) {
#pragma unroll
  for (int d = 0; d < HD / 8; ++d)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[d][i] = 0.0f;
}

// ---------------- forward ----------------
// grid (B*NH, ceil(T/kTile)), kThreads threads.
template <int HD>
__global__ void __launch_bounds__(kThreads)
    attention_forward_tc_kernel(float* out, float* lse, const float* qkv, int T, int NH, int KVH, float scale,
                                bool vec) {
  using S = TileShapes<HD>;
  TRIDENT_TC_SHARED(shared);
  SharedCursor cursor{shared};
  bf16* qs = cursor.take<bf16>(S::kTileBytes);
  bf16* ks = cursor.take<bf16>(S::kTileBytes);
  bf16* vs = cursor.take<bf16>(S::kTileBytes);

  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * kTile;  // the longest (last) query tiles start first
  const int C = NH * HD;
  const int64_t RS = int64_t(NH + 2 * KVH) * HD;
  const float* kbase = qkv + int64_t(b) * T * RS + int64_t(NH + h / (NH / KVH)) * HD;
  const int r0 = int(threadIdx.x) / 32 * kWarpRows;  // the warp's rows of the tile
  const LanePlace at;

  load_rounded_tile<HD>(qs, qkv + int64_t(b) * T * RS + int64_t(h) * HD, RS, q0, T, vec);
  float acc[HD / 8][4];
  zero<HD>(acc);
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};  // rows g, g + 8; sum: the lane's part

  const int kend = min(q0 + kTile, T);
  for (int k0 = 0; k0 < kend; k0 += kTile) {
    __syncthreads();  // everyone is done with the previous K and V tiles (and q is in place)
    load_rounded_tile<HD>(ks, kbase, RS, k0, T, vec);
    load_rounded_tile<HD>(vs, kbase + int64_t(KVH) * HD, RS, k0, T, vec);
    __syncthreads();

    const int n_blocks = visible_blocks8(q0 + r0, k0, kTile / 8);  // uniform over the warp
    float s[kTile / 8][4];
    warp_scores<HD>(s, qs + r0 * S::kLd, S::kLd, ks, S::kLd, n_blocks);

    // Online softmax of the lane's two rows over their visible keys. Key 0 is visible to every row, so
    // the max is finite from the first tile on; a row that sees no key of this tile keeps its max
    // (correction 1, P = 0).
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const bool visible = k0 + at.col(n, i) <= q0 + r0 + at.row(i);
        s[n][i] = visible ? s[n][i] * scale : -INFINITY;
        tile_max[i / 2] = fmaxf(tile_max[i / 2], s[n][i]);
      }
    float corr[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_new = fmaxf(row_max[r], group_max(tile_max[r]));
      corr[r] = expf(row_max[r] - m_new);  // 0 on the first tile
      row_max[r] = m_new;
      row_sum[r] *= corr[r];
    }
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        s[n][i] = expf(s[n][i] - row_max[i / 2]);  // 0 where masked
        row_sum[i / 2] += s[n][i];
      }
#pragma unroll
    for (int d = 0; d < HD / 8; ++d)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[d][i] *= corr[i / 2];
    warp_accumulate<HD>(acc, s, vs, S::kLd, n_blocks);
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) row_sum[r] = group_sum(row_sum[r]);
  const int row0 = q0 + r0;  // the warp's first query
#pragma unroll
  for (int d = 0; d < HD / 8; ++d)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int t = row0 + at.row(i);
      if (t < T) out[(int64_t(b) * T + t) * C + int64_t(h) * HD + at.col(d, i)] = acc[d][i] / row_sum[i / 2];
    }
  if (at.t == 0)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int t = row0 + at.g + 8 * r;
      if (t < T) lse[int64_t(bh) * T + t] = row_max[r] + logf(row_sum[r]);
    }
}

// ---------------- backward ----------------

// D[(b*NH + h)*T + t] = sum_d bf16(dout[b,t,h*HD+d]) * out[b,t,h*HD+d]; one warp per (b,t,h), in double.
// dout is rounded as dP = dout v^T sees it, so that dS = P (dP - D) sums to ~0 over a row.
__global__ void attention_row_dot_bf16_kernel(float* D, const float* dout, const float* out, int64_t rows, int T,
                                              int NH, int HD) {
  const int lane = threadIdx.x & 31;
  const int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (r >= rows) return;  // uniform per warp
  const int64_t bt = r / NH;
  const int h = int(r % NH);
  const int64_t off = bt * int64_t(NH) * HD + int64_t(h) * HD;
  double s = 0.0;
  for (int d = lane; d < HD; d += 32)
    s += double(__bfloat162float(__float2bfloat16_rn(dout[off + d]))) * double(out[off + d]);
  s = warp_sum(s);
  if (lane == 0) {
    const int64_t b = bt / T, t = bt % T;
    D[(b * NH + h) * T + t] = float(s);
  }
}

// grid (B*KVH, ceil(T/kTile)), kThreads threads. The block's keys [j0, j0 + kTile) of one key/value
// head; warp w owns keys j0 + [16w, 16w + 16) (the rows of S^T, dP^T, dK, dV).
template <int HD>
__global__ void __launch_bounds__(kThreads)
    attention_backward_kv_tc_kernel(float* dqkv, const float* dout, const float* qkv, const float* lse,
                                    const float* D, int T, int NH, int KVH, float scale, bool vec, GradWrite write) {
  using S = TileShapes<HD>;
  constexpr int ld = S::kLd;
  TRIDENT_TC_SHARED(shared);
  SharedCursor cursor{shared};
  bf16* ks = cursor.take<bf16>(S::kTileBytes);
  bf16* vs = cursor.take<bf16>(S::kTileBytes);
  bf16* qs = cursor.take<bf16>(S::kTileBytes);
  bf16* dos = cursor.take<bf16>(S::kTileBytes);
  float* lse_s = cursor.take<float>(S::kStatBytes);
  float* D_s = cursor.take<float>(S::kStatBytes);

  const int bkv = blockIdx.x, b = bkv / KVH, kvh = bkv % KVH, group = NH / KVH;
  const int j0 = blockIdx.y * kTile;  // the first key tiles see the most queries: they start first
  const int C = NH * HD;
  const int64_t RS = int64_t(NH + 2 * KVH) * HD;
  const float* kbase = qkv + int64_t(b) * T * RS + int64_t(NH + kvh) * HD;
  const int r0 = int(threadIdx.x) / 32 * kWarpRows;
  const int key0 = j0 + r0;  // the warp's first key (>= T: padding, never written)
  const LanePlace at;

  load_rounded_tile<HD>(ks, kbase, RS, j0, T, vec);
  load_rounded_tile<HD>(vs, kbase + int64_t(KVH) * HD, RS, j0, T, vec);
  float dk[HD / 8][4], dv[HD / 8][4];  // the warp's keys' gradients
  zero<HD>(dk);
  zero<HD>(dv);

  for (int h = kvh * group; h < (kvh + 1) * group; ++h) {  // the group's query heads, ascending
    const int64_t bh = int64_t(b) * NH + h;
    for (int i0 = j0; i0 < T; i0 += kTile) {  // query tiles from the diagonal on
      __syncthreads();
      load_rounded_tile<HD>(qs, qkv + int64_t(b) * T * RS + int64_t(h) * HD, RS, i0, T, vec);
      load_rounded_tile<HD>(dos, dout + int64_t(b) * T * C + int64_t(h) * HD, C, i0, T, vec);
      load_row_statistic(lse_s, lse + bh * T, i0, T);
      load_row_statistic(D_s, D + bh * T, i0, T);
      __syncthreads();

      for (int c = 0; c < kTile; c += kHalf) {
        // Queries i0 + c + [0, kHalf) all before the warp's first key, or all past T: nothing to add.
        if (i0 + c + kHalf <= key0 || i0 + c >= T) continue;  // uniform over the warp
        float st[kHalf / 8][4], dpt[kHalf / 8][4];
        warp_scores<HD>(st, ks + r0 * ld, ld, qs + c * ld, ld, kHalf / 8);
        warp_scores<HD>(dpt, vs + r0 * ld, ld, dos + c * ld, ld, kHalf / 8);
#pragma unroll
        for (int n = 0; n < kHalf / 8; ++n)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int lq = c + at.col(n, i), query = i0 + lq;
            const bool visible = query < T && key0 + at.row(i) <= query;  // also makes the key real
            const float p = visible ? expf(st[n][i] * scale - lse_s[lq]) : 0.0f;
            dpt[n][i] = visible ? p * (dpt[n][i] - D_s[lq]) : 0.0f;
            st[n][i] = p;
          }
        warp_accumulate<HD>(dv, st, dos + c * ld, ld, kHalf / 8);  // dV += P^T dO
        warp_accumulate<HD>(dk, dpt, qs + c * ld, ld, kHalf / 8);  // dK += dS^T Q
      }
    }
  }

  const int rows = min(kWarpRows, T - key0);
  if (rows <= 0) return;  // the warp's keys are all padding
  float* dk_rows = dqkv + (int64_t(b) * T + key0) * RS + int64_t(NH + kvh) * HD;
  warp_add_strip<HD>(dk_rows, RS, rows, dk, scale, write);
  warp_add_strip<HD>(dk_rows + int64_t(KVH) * HD, RS, rows, dv, 1.0f, write);
}

// grid (B*NH, ceil(T/kTile)), kThreads threads. The block's query rows [q0, q0 + kTile) of head h; warp w
// owns rows q0 + [16w, 16w + 16).
template <int HD>
__global__ void __launch_bounds__(kThreads)
    attention_backward_q_tc_kernel(float* dqkv, const float* dout, const float* qkv, const float* lse,
                                   const float* D, int T, int NH, int KVH, float scale, bool vec, GradWrite write) {
  using S = TileShapes<HD>;
  constexpr int ld = S::kLd;
  TRIDENT_TC_SHARED(shared);
  SharedCursor cursor{shared};
  bf16* qs = cursor.take<bf16>(S::kTileBytes);
  bf16* dos = cursor.take<bf16>(S::kTileBytes);
  bf16* ks = cursor.take<bf16>(S::kTileBytes);
  bf16* vs = cursor.take<bf16>(S::kTileBytes);

  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * kTile;  // the longest (last) query tiles start first
  const int C = NH * HD;
  const int64_t RS = int64_t(NH + 2 * KVH) * HD;
  const float* kbase = qkv + int64_t(b) * T * RS + int64_t(NH + h / (NH / KVH)) * HD;
  const int r0 = int(threadIdx.x) / 32 * kWarpRows;
  const int row0 = q0 + r0;  // the warp's first query (>= T: padding, never written)
  const LanePlace at;

  load_rounded_tile<HD>(qs, qkv + int64_t(b) * T * RS + int64_t(h) * HD, RS, q0, T, vec);
  load_rounded_tile<HD>(dos, dout + int64_t(b) * T * C + int64_t(h) * HD, C, q0, T, vec);
  float lse_r[2], D_r[2];  // of the lane's rows g and g + 8
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int t = row0 + at.g + 8 * r;
    lse_r[r] = t < T ? lse[int64_t(bh) * T + t] : 0.0f;
    D_r[r] = t < T ? D[int64_t(bh) * T + t] : 0.0f;
  }
  float dq[HD / 8][4];  // the warp's rows' gradient
  zero<HD>(dq);

  const int kend = min(q0 + kTile, T);
  for (int k0 = 0; k0 < kend; k0 += kTile) {
    __syncthreads();
    load_rounded_tile<HD>(ks, kbase, RS, k0, T, vec);
    load_rounded_tile<HD>(vs, kbase + int64_t(KVH) * HD, RS, k0, T, vec);
    __syncthreads();

    for (int c = 0; c < kTile; c += kHalf) {
      const int n_blocks = visible_blocks8(row0, k0 + c, kHalf / 8);  // uniform over the warp
      if (n_blocks == 0) continue;
      float s[kHalf / 8][4], dp[kHalf / 8][4];
      warp_scores<HD>(s, qs + r0 * ld, ld, ks + c * ld, ld, n_blocks);
      warp_scores<HD>(dp, dos + r0 * ld, ld, vs + c * ld, ld, n_blocks);
#pragma unroll
      for (int n = 0; n < kHalf / 8; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int row = row0 + at.row(i);
          const bool visible = row < T && k0 + c + at.col(n, i) <= row;
          const float p = visible ? expf(s[n][i] * scale - lse_r[i / 2]) : 0.0f;
          dp[n][i] = visible ? p * (dp[n][i] - D_r[i / 2]) : 0.0f;
        }
      warp_accumulate<HD>(dq, dp, ks + c * ld, ld, n_blocks);  // dQ += dS K
    }
  }

  const int rows = min(kWarpRows, T - row0);
  if (rows <= 0) return;  // the warp's rows are all padding
  warp_add_strip<HD>(dqkv + (int64_t(b) * T + row0) * RS + int64_t(h) * HD, RS, rows, dq, scale, write);
}

float attention_scale(int64_t HD) { return float(1.0 / std::sqrt(double(HD))); }

// An operand's tiles are loaded as 16-byte vectors when its base is 16-byte aligned (aligned16): every row
// start (base + t * stride + head * HD; HD and the strides are multiples of 64) then is.

void check_tc_shape(const char* op, int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HD) {
  check_attention_heads(op, NH, KVH);
  TRIDENT_CHECK(tensor_core_attention_supported(HD), "{}: head size {} has no tensor-core kernel (64 or 128)", op,
                HD);
  TRIDENT_CHECK(B * NH < (int64_t(1) << 31) && ceil_div(T, kTile) <= 65535 && (NH + 2 * KVH) * HD < (int64_t(1) << 31),
                "{}: shape B={} T={} NH={} KVH={} HD={} too large", op, B, T, NH, KVH, HD);
}

// launch() with `bytes` of dynamic shared memory, above the default 48 KB limit.
template <class... Params, class... Args>
void launch_with_shared(void (*kernel)(Params...), dim3 grid, size_t bytes, cudaStream_t stream, Args&&... args) {
  TRIDENT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  TRIDENT_CUDA_CHECK(launch(kernel, grid, kThreads, bytes, stream, std::forward<Args>(args)...));
}

template <int HD>
void forward_tc(cudaStream_t stream, float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t NH,
                int64_t KVH) {
  const dim3 grid(unsigned(B * NH), unsigned(ceil_div(T, kTile)));
  launch_with_shared(attention_forward_tc_kernel<HD>, grid, TileShapes<HD>::kForwardBytes, stream, out, lse, qkv,
                     int(T), int(NH), int(KVH), attention_scale(HD), aligned16(qkv));
}

template <int HD>
void backward_tc(cudaStream_t stream, float* dqkv, const float* dout, const float* qkv, const float* lse,
                 const float* D, int64_t B, int64_t T, int64_t NH, int64_t KVH, GradWrite write) {
  const unsigned tiles = unsigned(ceil_div(T, kTile));
  const float scale = attention_scale(HD);
  const bool vec = aligned16(qkv) && aligned16(dout);
  launch_with_shared(attention_backward_kv_tc_kernel<HD>, dim3(unsigned(B * KVH), tiles),
                     TileShapes<HD>::kBackwardKvBytes, stream, dqkv, dout, qkv, lse, D, int(T), int(NH), int(KVH),
                     scale, vec, write);
  launch_with_shared(attention_backward_q_tc_kernel<HD>, dim3(unsigned(B * NH), tiles),
                     TileShapes<HD>::kBackwardQBytes, stream, dqkv, dout, qkv, lse, D, int(T), int(NH), int(KVH),
                     scale, vec, write);
}

}  // namespace

bool tensor_core_attention_supported(int64_t HD) { return HD == 64 || HD == 128; }

void attention_forward_tc(cudaStream_t stream, float* out, float* lse, const float* qkv, int64_t B, int64_t T,
                          int64_t NH, int64_t KVH, int64_t HD) {
  check_attention_heads("attention_forward", NH, KVH);
  if (B <= 0 || T <= 0) return;
  check_tc_shape("attention_forward", B, T, NH, KVH, HD);
  if (HD == 64)
    forward_tc<64>(stream, out, lse, qkv, B, T, NH, KVH);
  else
    forward_tc<128>(stream, out, lse, qkv, B, T, NH, KVH);
}

void attention_backward_tc(cudaStream_t stream, DeviceAllocator& alloc, float* dqkv, const float* dout,
                           const float* qkv, const float* out, const float* lse, int64_t B, int64_t T, int64_t NH,
                           int64_t KVH, int64_t HD, GradWrite write) {
  check_attention_heads("attention_backward", NH, KVH);
  if (B <= 0 || T <= 0) return;
  check_tc_shape("attention_backward", B, T, NH, KVH, HD);
  const int64_t rows = B * T * NH;
  auto* D = static_cast<float*>(alloc.allocate(rows * int64_t(sizeof(float))));
  constexpr int kRowDotWarps = 8;
  TRIDENT_CUDA_CHECK(launch(attention_row_dot_bf16_kernel, unsigned(ceil_div(rows, kRowDotWarps)), kRowDotWarps * 32,
                            0, stream, D, dout, out, rows, int(T), int(NH), int(HD)));
  if (HD == 64)
    backward_tc<64>(stream, dqkv, dout, qkv, lse, D, B, T, NH, KVH, write);
  else
    backward_tc<128>(stream, dqkv, dout, qkv, lse, D, B, T, NH, KVH, write);
  alloc.release(D);  // stream-ordered
}

}  // namespace trident::cuda
