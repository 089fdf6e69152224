// Causal grouped-query self-attention on tensor cores: WMMA 16x16x16 with bf16 operands and fp32
// accumulators, forward and backward side by side. Used by the Kernels when the matmul precision is
// BF16 and the head size is 64 or 128 (cuda_kernels.cu); other head sizes, the other precisions and
// attention_forward_rows (incremental decoding) run attention.cu's fp32 kernels. Same contract and
// layout as attention.cu (qkv [B,T,(NH+2KVH)HD], out [B,T,NH HD], lse [B,NH,T], query head h reads
// key/value head h/(NH/KVH), backward accumulates into dqkv), storage fp32 throughout.
//
// What is rounded to bf16 (to nearest even), everything else fp32 (kernels.hpp, set_matmul_precision):
//   forward  q, k, v as they are loaded into shared memory; S = q k^T (fp32 accumulation), s = S scale;
//            online softmax in fp32 (running max m and sum l of the unrounded P = exp(s - m));
//            P rounded before P v; out = acc / l, lse = m + log l.
//   backward q, k, v, dout as loaded; D = sum_d bf16(dout) out in double; P = exp(s - lse) in fp32;
//            dP = dout v^T; dS = P (dP - D); dS rounded before dQ = dS k and dK = dS^T q (both times
//            scale, in fp32, at the end); P rounded before dV = P^T dout.
// The tiles are kTile = 64 query rows and 64 keys, zero-padded past T, in dynamic shared memory
// (bf16 operand tiles, fp32 score and accumulator tiles, rows padded by 16 bytes so that every WMMA
// pointer is 32-byte aligned and ldm a multiple of 16 bytes). A block has 4 warps; warp w owns the 16
// rows [16w, 16w + 16) of the block's tile: it computes their strip of S (or S^T) with WMMA, stores it
// to shared memory, does the row-wise softmax work there (two lanes per row, 32 columns each: a WMMA
// fragment's layout is opaque, so nothing row-wise touches fragments), and accumulates its rows of the
// output in shared memory through load/mma/store (the rows need rescaling between tiles). Sub-tiles of
// 16 keys that the causal mask hides from all 16 rows of a warp are skipped.
//   forward   block = (b, h, query tile): loop over key tiles up to the diagonal.
//   dK/dV     block = (b, kv head, key tile): loop over the group's query heads in ascending order and,
//             for each, over query tiles from the diagonal to T; S^T = K Q^T, dP^T = V dO^T per warp's
//             keys; dV += P^T dO, dK += dS^T Q accumulated in registers (fragments: no rescaling), added
//             into dqkv at the end through a 16 x 16 staging tile per warp.
//   dQ        block = (b, h, query tile): loop over key tiles up to the diagonal; dQ += dS K, in registers.
// Tiles of q, k, v and dout are loaded with 16-byte loads, all of a thread's issued before the first is
// converted (load_rounded_tile), and each warp loads its A operands' fragments once per product.
// Determinism: every output element has one owner (a warp's rows in shared memory or registers, then
// one thread's += into dqkv), every loop has a fixed order, there are no atomics: reruns are bit-identical.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cmath>
#include <utility>

#include "cuda/allocator.cuh"
#include "cuda/check.cuh"
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

namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kTile = 64;  // query rows and keys per tile: 16 rows per warp
constexpr int kFrag = 16;  // the WMMA shape, 16x16x16
static_assert(kTile == kWarps * kFrag, "each warp owns one 16-row strip of a tile");

// Row strides (elements) and byte sizes of the shared-memory tiles, all of kTile rows. 16 bytes of
// padding per row keep ldm a multiple of 16 bytes and spread the rows over the banks; every tile's
// size is a multiple of 128 bytes, so tiles laid one after another stay 32-byte aligned.
template <int HD>
struct TileShapes {
  static constexpr int kLdOperand = HD + 8;      // bf16 rows of HD: q, k, v, dout
  static constexpr int kLdScores = kTile + 4;    // fp32 rows of kTile: S, dP
  static constexpr int kLdProbs = kTile + 8;     // bf16 rows of kTile: P, dS
  static constexpr int kLdAccum = HD + 4;        // fp32 rows of HD: the forward's out accumulator
  static constexpr size_t kOperandBytes = size_t(kTile) * kLdOperand * sizeof(bf16);
  static constexpr size_t kScoresBytes = size_t(kTile) * kLdScores * sizeof(float);
  static constexpr size_t kProbsBytes = size_t(kTile) * kLdProbs * sizeof(bf16);
  static constexpr size_t kAccumBytes = size_t(kTile) * kLdAccum * sizeof(float);
  static constexpr size_t kRowBytes = size_t(kTile) * sizeof(float);  // one statistic per row
  // forward: q, k, v; S; P; out; max, sum.
  static constexpr size_t kForwardBytes = 3 * kOperandBytes + kScoresBytes + kProbsBytes + kAccumBytes + 2 * kRowBytes;
  // dK/dV and dQ: q, dout, k, v; S, dP; P and dS (dQ: dS only); lse, D. Their accumulators are in
  // registers (AccumStrip).
  static constexpr size_t kBackwardKvBytes = 4 * kOperandBytes + 2 * kScoresBytes + 2 * kProbsBytes + 2 * kRowBytes;
  static constexpr size_t kBackwardQBytes = 4 * kOperandBytes + 2 * kScoresBytes + kProbsBytes + 2 * kRowBytes;
  static_assert(kOperandBytes % 128 == 0 && kScoresBytes % 128 == 0 && kProbsBytes % 128 == 0 &&
                    kAccumBytes % 128 == 0 && kRowBytes % 128 == 0,
                "tiles keep the next one 32-byte aligned");
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

// tile[j][d] <- bf16(src[(row0 + j) stride + d]) for j < kTile, d < HD; rows at or past T are zero.
// Cooperative over the block (kThreads), consecutive threads on consecutive d (coalesced). With `vec`
// (src and stride 16-byte aligned: the launchers check) each thread issues all its 16-byte loads, 8 at
// HD 64 and 16 at HD 128, before it converts the first: the tile costs one memory round trip, where a
// loop of one scalar load and its conversion waited for every element in turn.
template <int HD>
__device__ void load_rounded_tile(bf16* tile, const float* src, int64_t stride, int row0, int T, bool vec) {
  constexpr int kLd = TileShapes<HD>::kLdOperand;
  if (vec) {
    constexpr int kVecsPerRow = HD / 4, kPerThread = kTile * kVecsPerRow / kThreads;
    static_assert(kTile * kVecsPerRow % kThreads == 0, "every thread loads the same number of vectors");
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
      bf16* o = tile + j * kLd + (q - j * kVecsPerRow) * 4;
      o[0] = __float2bfloat16_rn(v[i].x);
      o[1] = __float2bfloat16_rn(v[i].y);
      o[2] = __float2bfloat16_rn(v[i].z);
      o[3] = __float2bfloat16_rn(v[i].w);
    }
    return;
  }
  for (int idx = threadIdx.x; idx < kTile * HD; idx += blockDim.x) {
    const int j = idx / HD, d = idx - j * HD, t = row0 + j;
    tile[j * kLd + d] = __float2bfloat16_rn(t < T ? src[int64_t(t) * stride + d] : 0.0f);
  }
}

// row[j] <- src[row0 + j], 0 past T.
__device__ void load_row_statistic(float* row, const float* src, int row0, int T) {
  for (int j = threadIdx.x; j < kTile; j += blockDim.x) row[j] = row0 + j < T ? src[row0 + j] : 0.0f;
}

__device__ void fill_shared(float* x, int n, float value) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) x[i] = value;
}

// One warp: the 16 x (16 n_tiles) strip out (row stride ldo) = A B^T, A 16 rows of HD at a, B's rows
// (n_tiles 16 of them) at b: scores of 16 rows against 16 n_tiles rows. A's fragments are loaded once
// for all n_tiles products (each product's k order is warp_mma's).
template <int HD>
__device__ void warp_scores(float* out, int ldo, const bf16* a, const bf16* b, int n_tiles) {
  constexpr int ld = TileShapes<HD>::kLdOperand, kSteps = HD / kFrag;
  wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, bf16, wmma::row_major> fa[kSteps];
#pragma unroll
  for (int k = 0; k < kSteps; ++k) wmma::load_matrix_sync(fa[k], a + k * kFrag, ld);
  for (int n = 0; n < n_tiles; ++n) {
    const bf16* bn = b + n * kFrag * ld;
    wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float> acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int k = 0; k < kSteps; ++k) {
      wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, bf16, wmma::col_major> fb;
      wmma::load_matrix_sync(fb, bn + k * kFrag, ld);
      wmma::mma_sync(acc, fa[k], fb, acc);
    }
    wmma::store_matrix_sync(out + n * kFrag, acc, ldo, wmma::mem_row_major);
  }
}

using AccumFragment = wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float>;
using ProbsFragment = wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, bf16, wmma::row_major>;
constexpr int kMaxSteps = kTile / kFrag;  // 16-wide steps of a product over one tile's keys or queries

// A warp's 16 x HD accumulator held in registers, HD / 16 fragments (dK, dV, dQ: sums without rescaling).
template <int HD>
struct AccumStrip {
  AccumFragment f[HD / kFrag];
  __device__ void zero() {
#pragma unroll
    for (int n = 0; n < HD / kFrag; ++n) wmma::fill_fragment(f[n], 0.0f);
  }
};

// The fragments of P's 16 rows (row stride kLdProbs) over the columns [k_begin, k_begin + 16 steps).
__device__ void load_probs(ProbsFragment (&fp)[kMaxSteps], const bf16* p, int ldp, int k_begin, int steps) {
#pragma unroll
  for (int k = 0; k < kMaxSteps; ++k)
    if (k < steps) wmma::load_matrix_sync(fp[k], p + k_begin + k * kFrag, ldp);
}

// sum += P B over `steps` 16-wide steps from k_begin, for output column tile n; B a row-major operand
// tile (kTile rows of HD). The k order is fixed: ascending.
template <int HD>
__device__ void accumulate_tile(AccumFragment& sum, const ProbsFragment (&fp)[kMaxSteps], const bf16* b, int n,
                                int k_begin, int steps) {
  constexpr int ld = TileShapes<HD>::kLdOperand;
#pragma unroll
  for (int k = 0; k < kMaxSteps; ++k) {
    if (k >= steps) break;
    wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, bf16, wmma::row_major> fb;
    wmma::load_matrix_sync(fb, b + int64_t(k_begin + k * kFrag) * ld + n * kFrag, ld);
    wmma::mma_sync(sum, fp[k], fb, sum);
  }
}

// One warp: the 16 x HD strip acc (fp32 in shared memory, row stride kLdAccum) += P B, P 16 rows of bf16
// (row stride kLdProbs) over the columns [k_begin, k_end) (multiples of 16). The forward's accumulator
// lives in shared memory because its rows are rescaled between key tiles.
template <int HD>
__device__ void warp_accumulate(float* acc, const bf16* p, const bf16* b, int k_begin, int k_end) {
  using S = TileShapes<HD>;
  const int steps = (k_end - k_begin) / kFrag;
  ProbsFragment fp[kMaxSteps];
  load_probs(fp, p, S::kLdProbs, k_begin, steps);
  for (int n = 0; n < HD / kFrag; ++n) {
    AccumFragment sum;
    wmma::load_matrix_sync(sum, acc + n * kFrag, S::kLdAccum, wmma::mem_row_major);
    accumulate_tile<HD>(sum, fp, b, n, k_begin, steps);
    wmma::store_matrix_sync(acc + n * kFrag, sum, S::kLdAccum, wmma::mem_row_major);
  }
}

// The same into a strip held in registers (the same products in the same order: the same bits).
template <int HD>
__device__ void warp_accumulate(AccumStrip<HD>& strip, const bf16* p, const bf16* b, int k_begin, int k_end) {
  const int steps = (k_end - k_begin) / kFrag;
  ProbsFragment fp[kMaxSteps];
  load_probs(fp, p, TileShapes<HD>::kLdProbs, k_begin, steps);
#pragma unroll
  for (int n = 0; n < HD / kFrag; ++n) accumulate_tile<HD>(strip.f[n], fp, b, n, k_begin, steps);
}

// One warp: dst[r * ld + d] += strip[r][d] * scale for its 16 rows r < rows (rows past T are not
// written), each fragment passed through the warp's 16 x 16 staging area of shared memory (row stride
// ldst); each element has one writer.
template <int HD>
__device__ void warp_add_strip(float* dst, int64_t ld, int rows, const AccumStrip<HD>& strip, float scale,
                               float* staging, int ldst) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int n = 0; n < HD / kFrag; ++n) {
    wmma::store_matrix_sync(staging, strip.f[n], ldst, wmma::mem_row_major);
    __syncwarp();
    for (int idx = lane; idx < kFrag * kFrag; idx += 32) {
      const int r = idx / kFrag, c = idx % kFrag;
      if (r < rows) dst[r * ld + n * kFrag + c] += staging[r * ldst + c] * scale;
    }
    __syncwarp();
  }
}

// 16-key sub-tiles of the key tile at k0 that some of the warp's query rows [first_row, first_row + 16)
// can see (causal: key <= row), 0..4.
__device__ int visible_subtiles(int first_row, int k0) {
  const int n = (first_row + kFrag - k0 + kFrag - 1) / kFrag;
  return n < 0 ? 0 : (n > kTile / kFrag ? kTile / kFrag : n);
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
  bf16* qs = cursor.take<bf16>(S::kOperandBytes);
  bf16* ks = cursor.take<bf16>(S::kOperandBytes);
  bf16* vs = cursor.take<bf16>(S::kOperandBytes);
  float* scores = cursor.take<float>(S::kScoresBytes);
  bf16* probs = cursor.take<bf16>(S::kProbsBytes);
  float* acc = cursor.take<float>(S::kAccumBytes);
  float* row_max = cursor.take<float>(S::kRowBytes);
  float* row_sum = cursor.take<float>(S::kRowBytes);

  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * kTile;  // the longest (last) query tiles start first
  const int C = NH * HD;
  const int64_t RS = int64_t(NH + 2 * KVH) * HD;
  const float* kbase = qkv + int64_t(b) * T * RS + int64_t(NH + h / (NH / KVH)) * HD;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r0 = warp * kFrag;               // the warp's rows of the tile
  const int row = r0 + lane / 2, half = lane % 2;  // two lanes per row, half the columns each
  const int t = q0 + row;                    // the row's query (>= T: padding, never written)

  load_rounded_tile<HD>(qs, qkv + int64_t(b) * T * RS + int64_t(h) * HD, RS, q0, T, vec);
  fill_shared(acc, kTile * S::kLdAccum, 0.0f);
  fill_shared(row_max, kTile, -INFINITY);
  fill_shared(row_sum, kTile, 0.0f);

  const int kend = min(q0 + kTile, T);
  for (int k0 = 0; k0 < kend; k0 += kTile) {
    __syncthreads();  // everyone is done with the previous K and V tiles (and the set-up is visible)
    load_rounded_tile<HD>(ks, kbase, RS, k0, T, vec);
    load_rounded_tile<HD>(vs, kbase + int64_t(KVH) * HD, RS, k0, T, vec);
    __syncthreads();

    const int n_tiles = visible_subtiles(q0 + r0, k0);  // uniform over the warp
    warp_scores<HD>(scores + r0 * S::kLdScores, S::kLdScores, qs + r0 * S::kLdOperand, ks, n_tiles);
    __syncwarp();

    // Online softmax of the row over its visible keys (columns past n_tiles * 16 are never visible).
    const float* s = scores + row * S::kLdScores;
    bf16* p = probs + row * S::kLdProbs;
    const int c_begin = half * (kTile / 2), c_end = c_begin + kTile / 2;
    float tile_max = -INFINITY;
    for (int c = c_begin; c < c_end; ++c)
      if (k0 + c <= t) tile_max = fmaxf(tile_max, s[c] * scale);
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float m_old = row_max[row];
    // Key 0 is visible to every row, so m_new is finite from the first tile on; a row that sees no key
    // of this tile keeps its max (corr = 1, P = 0).
    const float m_new = fmaxf(m_old, tile_max);
    const float corr = expf(m_old - m_new);  // 0 on the first tile
    float sum = 0.0f;
    for (int c = c_begin; c < c_end; ++c) {
      const float pc = k0 + c <= t ? expf(s[c] * scale - m_new) : 0.0f;
      sum += pc;
      p[c] = __float2bfloat16_rn(pc);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);  // both lanes have read row_max and row_sum here
    if (half == 0) {
      row_sum[row] = row_sum[row] * corr + sum;
      row_max[row] = m_new;
    }
    float* o = acc + row * S::kLdAccum;
    for (int d = half * (HD / 2); d < (half + 1) * (HD / 2); ++d) o[d] *= corr;
    __syncwarp();

    warp_accumulate<HD>(acc + r0 * S::kLdAccum, probs + r0 * S::kLdProbs, vs, 0, n_tiles * kFrag);
  }
  __syncwarp();

  for (int idx = lane; idx < kFrag * HD; idx += 32) {  // the warp's rows, coalesced along d
    const int r = r0 + idx / HD, d = idx % HD, tr = q0 + r;
    if (tr < T) out[(int64_t(b) * T + tr) * C + int64_t(h) * HD + d] = acc[r * S::kLdAccum + d] / row_sum[r];
  }
  if (lane < kFrag && q0 + r0 + lane < T)
    lse[int64_t(bh) * T + q0 + r0 + lane] = row_max[r0 + lane] + logf(row_sum[r0 + lane]);
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
                                    const float* D, int T, int NH, int KVH, float scale, bool vec) {
  using S = TileShapes<HD>;
  TRIDENT_TC_SHARED(shared);
  SharedCursor cursor{shared};
  bf16* qs = cursor.take<bf16>(S::kOperandBytes);
  bf16* dos = cursor.take<bf16>(S::kOperandBytes);
  bf16* ks = cursor.take<bf16>(S::kOperandBytes);
  bf16* vs = cursor.take<bf16>(S::kOperandBytes);
  float* st = cursor.take<float>(S::kScoresBytes);   // S^T [key][query]
  float* dpt = cursor.take<float>(S::kScoresBytes);  // dP^T
  bf16* pt = cursor.take<bf16>(S::kProbsBytes);      // bf16(P^T)
  bf16* dst = cursor.take<bf16>(S::kProbsBytes);     // bf16(dS^T)
  float* lse_s = cursor.take<float>(S::kRowBytes);
  float* D_s = cursor.take<float>(S::kRowBytes);

  const int bkv = blockIdx.x, b = bkv / KVH, kvh = bkv % KVH, group = NH / KVH;
  const int j0 = blockIdx.y * kTile;  // the first key tiles see the most queries: they start first
  const int C = NH * HD;
  const int64_t RS = int64_t(NH + 2 * KVH) * HD;
  const float* kbase = qkv + int64_t(b) * T * RS + int64_t(NH + kvh) * HD;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r0 = warp * kFrag;
  const int row = r0 + lane / 2, half = lane % 2;
  const int j = j0 + row;  // the row's key (>= T: padding, never written)

  load_rounded_tile<HD>(ks, kbase, RS, j0, T, vec);
  load_rounded_tile<HD>(vs, kbase + int64_t(KVH) * HD, RS, j0, T, vec);
  AccumStrip<HD> dk, dv;  // the warp's keys' gradients
  dk.zero();
  dv.zero();

  for (int h = kvh * group; h < (kvh + 1) * group; ++h) {  // the group's query heads, ascending
    const int64_t bh = int64_t(b) * NH + h;
    for (int i0 = j0; i0 < T; i0 += kTile) {  // query tiles from the diagonal on
      __syncthreads();
      load_rounded_tile<HD>(qs, qkv + int64_t(b) * T * RS + int64_t(h) * HD, RS, i0, T, vec);
      load_rounded_tile<HD>(dos, dout + int64_t(b) * T * C + int64_t(h) * HD, C, i0, T, vec);
      load_row_statistic(lse_s, lse + bh * T, i0, T);
      load_row_statistic(D_s, D + bh * T, i0, T);
      __syncthreads();

      // Query sub-tiles before n_first end before the warp's first key: masked for all its keys.
      const int n_first = i0 >= j0 + r0 ? 0 : (j0 + r0 - i0) / kFrag;
      const int n_tiles = kTile / kFrag - n_first;
      warp_scores<HD>(st + r0 * S::kLdScores + n_first * kFrag, S::kLdScores, ks + r0 * S::kLdOperand,
                      qs + n_first * kFrag * S::kLdOperand, n_tiles);
      warp_scores<HD>(dpt + r0 * S::kLdScores + n_first * kFrag, S::kLdScores, vs + r0 * S::kLdOperand,
                      dos + n_first * kFrag * S::kLdOperand, n_tiles);
      __syncwarp();

      const float* s = st + row * S::kLdScores;
      const float* dp = dpt + row * S::kLdScores;
      bf16* p_out = pt + row * S::kLdProbs;
      bf16* ds_out = dst + row * S::kLdProbs;
      for (int c = half * (kTile / 2); c < (half + 1) * (kTile / 2); ++c) {
        const int i = i0 + c;
        const bool visible = i < T && j <= i;  // j <= i < T also makes the key real
        const float p = visible ? expf(s[c] * scale - lse_s[c]) : 0.0f;
        const float ds = visible ? p * (dp[c] - D_s[c]) : 0.0f;
        p_out[c] = __float2bfloat16_rn(p);
        ds_out[c] = __float2bfloat16_rn(ds);
      }
      __syncwarp();

      warp_accumulate<HD>(dv, pt + r0 * S::kLdProbs, dos, n_first * kFrag, kTile);
      warp_accumulate<HD>(dk, dst + r0 * S::kLdProbs, qs, n_first * kFrag, kTile);
    }
  }
  __syncwarp();

  // Staged through the warp's own rows of S^T, which no other warp touches.
  const int rows = min(kFrag, T - (j0 + r0));
  if (rows <= 0) return;  // the warp's keys are all padding
  float* dk_rows = dqkv + (int64_t(b) * T + j0 + r0) * RS + int64_t(NH + kvh) * HD;
  warp_add_strip<HD>(dk_rows, RS, rows, dk, scale, st + r0 * S::kLdScores, S::kLdScores);
  warp_add_strip<HD>(dk_rows + int64_t(KVH) * HD, RS, rows, dv, 1.0f, st + r0 * S::kLdScores, S::kLdScores);
}

// grid (B*NH, ceil(T/kTile)), kThreads threads. The block's query rows [q0, q0 + kTile) of head h.
template <int HD>
__global__ void __launch_bounds__(kThreads)
    attention_backward_q_tc_kernel(float* dqkv, const float* dout, const float* qkv, const float* lse,
                                   const float* D, int T, int NH, int KVH, float scale, bool vec) {
  using S = TileShapes<HD>;
  TRIDENT_TC_SHARED(shared);
  SharedCursor cursor{shared};
  bf16* qs = cursor.take<bf16>(S::kOperandBytes);
  bf16* dos = cursor.take<bf16>(S::kOperandBytes);
  bf16* ks = cursor.take<bf16>(S::kOperandBytes);
  bf16* vs = cursor.take<bf16>(S::kOperandBytes);
  float* scores = cursor.take<float>(S::kScoresBytes);
  float* dps = cursor.take<float>(S::kScoresBytes);
  bf16* dss = cursor.take<bf16>(S::kProbsBytes);
  float* lse_s = cursor.take<float>(S::kRowBytes);
  float* D_s = cursor.take<float>(S::kRowBytes);

  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * kTile;  // the longest (last) query tiles start first
  const int C = NH * HD;
  const int64_t RS = int64_t(NH + 2 * KVH) * HD;
  const float* kbase = qkv + int64_t(b) * T * RS + int64_t(NH + h / (NH / KVH)) * HD;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r0 = warp * kFrag;
  const int row = r0 + lane / 2, half = lane % 2;
  const int i = q0 + row;  // the row's query (>= T: padding, never written)

  load_rounded_tile<HD>(qs, qkv + int64_t(b) * T * RS + int64_t(h) * HD, RS, q0, T, vec);
  load_rounded_tile<HD>(dos, dout + int64_t(b) * T * C + int64_t(h) * HD, C, q0, T, vec);
  load_row_statistic(lse_s, lse + int64_t(bh) * T, q0, T);
  load_row_statistic(D_s, D + int64_t(bh) * T, q0, T);
  AccumStrip<HD> dq;  // the warp's rows' gradient
  dq.zero();

  const int kend = min(q0 + kTile, T);
  for (int k0 = 0; k0 < kend; k0 += kTile) {
    __syncthreads();
    load_rounded_tile<HD>(ks, kbase, RS, k0, T, vec);
    load_rounded_tile<HD>(vs, kbase + int64_t(KVH) * HD, RS, k0, T, vec);
    __syncthreads();

    const int n_tiles = visible_subtiles(q0 + r0, k0);
    warp_scores<HD>(scores + r0 * S::kLdScores, S::kLdScores, qs + r0 * S::kLdOperand, ks, n_tiles);
    warp_scores<HD>(dps + r0 * S::kLdScores, S::kLdScores, dos + r0 * S::kLdOperand, vs, n_tiles);
    __syncwarp();

    const float* s = scores + row * S::kLdScores;
    const float* dp = dps + row * S::kLdScores;
    bf16* ds_out = dss + row * S::kLdProbs;
    for (int c = half * (kTile / 2); c < (half + 1) * (kTile / 2); ++c) {
      const bool visible = i < T && k0 + c <= i;
      const float p = visible ? expf(s[c] * scale - lse_s[row]) : 0.0f;
      ds_out[c] = __float2bfloat16_rn(visible ? p * (dp[c] - D_s[row]) : 0.0f);
    }
    __syncwarp();

    warp_accumulate<HD>(dq, dss + r0 * S::kLdProbs, ks, 0, n_tiles * kFrag);
  }
  __syncwarp();

  // Staged through the warp's own rows of S.
  const int rows = min(kFrag, T - (q0 + r0));
  if (rows <= 0) return;  // the warp's rows are all padding
  warp_add_strip<HD>(dqkv + (int64_t(b) * T + q0 + r0) * RS + int64_t(h) * HD, RS, rows, dq, scale,
                     scores + r0 * S::kLdScores, S::kLdScores);
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
                 const float* D, int64_t B, int64_t T, int64_t NH, int64_t KVH) {
  const unsigned tiles = unsigned(ceil_div(T, kTile));
  const float scale = attention_scale(HD);
  const bool vec = aligned16(qkv) && aligned16(dout);
  launch_with_shared(attention_backward_kv_tc_kernel<HD>, dim3(unsigned(B * KVH), tiles),
                     TileShapes<HD>::kBackwardKvBytes, stream, dqkv, dout, qkv, lse, D, int(T), int(NH), int(KVH),
                     scale, vec);
  launch_with_shared(attention_backward_q_tc_kernel<HD>, dim3(unsigned(B * NH), tiles),
                     TileShapes<HD>::kBackwardQBytes, stream, dqkv, dout, qkv, lse, D, int(T), int(NH), int(KVH),
                     scale, vec);
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
                           int64_t KVH, int64_t HD) {
  check_attention_heads("attention_backward", NH, KVH);
  if (B <= 0 || T <= 0) return;
  check_tc_shape("attention_backward", B, T, NH, KVH, HD);
  const int64_t rows = B * T * NH;
  auto* D = static_cast<float*>(alloc.allocate(rows * int64_t(sizeof(float))));
  constexpr int kRowDotWarps = 8;
  TRIDENT_CUDA_CHECK(launch(attention_row_dot_bf16_kernel, unsigned(ceil_div(rows, kRowDotWarps)), kRowDotWarps * 32,
                            0, stream, D, dout, out, rows, int(T), int(NH), int(HD)));
  if (HD == 64)
    backward_tc<64>(stream, dqkv, dout, qkv, lse, D, B, T, NH, KVH);
  else
    backward_tc<128>(stream, dqkv, dout, qkv, lse, D, B, T, NH, KVH);
  alloc.release(D);  // stream-ordered
}

}  // namespace trident::cuda
