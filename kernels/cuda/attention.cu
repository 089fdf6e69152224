// Causal grouped-query self-attention, flash style, fp32, forward and backward side by side.
//
// Layout: qkv [B,T,RS], RS = (NH + 2 KVH) HD: each row is q [NH,HD] | k [KVH,HD] | v [KVH,HD]; query
// head h reads key/value head h / (NH/KVH) in place (KVH divides NH; KVH = NH is multi-head attention,
// the same kernels and bits as before grouped-query attention). out [B,T,C = NH HD]; lse [B,NH,T].
// No [T,T] tensor ever exists in global memory; the backward recomputes P = exp(s - lse).
//
// Thread layout ("segments"): a query (or key) row of the padded head dimension DPT*G is owned by G
// consecutive lanes of a warp, lane g holding dimensions [g*DPT, (g+1)*DPT) in registers. A dot
// product is each lane's DPT-term sum followed by an xor butterfly over the G lanes (all G lanes
// end with the same bits). Dimensions >= HD (padding) are zero in every operand, so any HD up to
// DPT*G works with the same code; HD in 1..128 picks the smallest instantiation that fits.
// In shared memory a row is stored as G segments of DPT floats, each followed by 4 floats of padding
// so that the G lanes of a group, reading the same offset of different segments, hit different
// banks; lanes of different rows read the same address (broadcast).
//
// forward  (block = BQ query rows of one (b,h)): q and the output accumulator in registers; loop over
//          key tiles of BK rows (K and V tiles in shared memory) up to the causal limit of the query
//          tile; per tile: BK scores, one online-softmax rescale, BK rank-1 updates of the accumulator.
//          out = acc / l, lse = m + log l. The query rows may be a range [q_begin, q_end) of the
//          sequence (attention_forward_rows: incremental decoding): a row's loop over key tiles is the
//          same whatever the range, so it gets the same bits as in the whole forward.
// backward D[t] = sum_d dout*out per row (one warp per row, double).
//          dK/dV kernel (block = BKV keys of one (b, key/value head)): k, v, dk, dv in registers; loop
//          over the group's query heads in ascending order and, for each, over query tiles of BQ rows
//          from the key tile's first key to T (Q, dout, lse, D tiles in shared memory);
//          per query row i: s, dp, p = exp(s*scale - lse_i), ds = p (dp - D_i) scale,
//          dv += p dout_i, dk += ds q_i.
//          dQ kernel (block = BQ query rows of one (b,h)): q, dout, dq in registers; loop over key tiles
//          of h's key/value head up to the causal limit: dq += ds k_j.
// Determinism: every output element is accumulated by one thread in a fixed loop order (query heads of
// a group, tiles and rows ascending), the butterflies have a fixed order, there are no atomics; results are added
// once into dqkv (+=) at the end.
#include <cmath>

#include "cuda/allocator.cuh"
#include "cuda/check.cuh"
#include "cuda/ops.cuh"
#include "cuda/reduce.cuh"
#include "kernel_checks.hpp"
#include "kernels.hpp"

namespace trident::cuda {

namespace {

constexpr int kAttnThreads = 128;
constexpr int kMaxHeadDim = 128;

// Sum over the G consecutive lanes of a group (G a power of two dividing 32).
template <int G>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = G / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <int DPT, int G>
struct Seg {
  static constexpr int kSeg = DPT + 4;  // floats per segment in shared memory (4 of padding)
  static constexpr int kRow = G * kSeg;  // floats per row in shared memory
  static constexpr int kDims = DPT * G;  // padded head dimension
  static_assert(DPT % 4 == 0, "segments are read as float4");
  static_assert(G >= 1 && G <= 32 && (G & (G - 1)) == 0, "a group is a power-of-two number of lanes");
};

// tile[j] <- rows row0 + j (j < ROWS) of one head: src[t * row_stride + d], zero for t >= T or
// d >= HD (row0 < T). Cooperative over the block (kAttnThreads), coalesced along d. With `vec` (HD a
// multiple of 4, src and row_stride 16-byte aligned: the launchers check) each thread issues all its
// 16-byte loads before it stores the first, so a tile costs one memory round trip instead of one per
// element in turn; the same values either way.
template <int DPT, int G, int ROWS>
__device__ __forceinline__ void load_tile(float* tile, const float* src, int64_t row_stride, int row0, int T, int HD,
                                          bool vec) {
  using S = Seg<DPT, G>;
  if (vec) {
    constexpr int kVecsPerRow = S::kDims / 4, kVecs = ROWS * kVecsPerRow;
    constexpr int kPerThread = (kVecs + kAttnThreads - 1) / kAttnThreads;
    float4 v[kPerThread];
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int q = i * kAttnThreads + int(threadIdx.x), j = q / kVecsPerRow, d = (q - j * kVecsPerRow) * 4;
      const bool inside = q < kVecs && row0 + j < T && d < HD;
      // Outside, a load of the tile's first element, dropped: no branch keeps the loads apart.
      const float4 x = *reinterpret_cast<const float4*>(src + (inside ? int64_t(row0 + j) * row_stride + d
                                                                       : int64_t(row0) * row_stride));
      v[i] = inside ? x : make_float4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int q = i * kAttnThreads + int(threadIdx.x), j = q / kVecsPerRow, d = (q - j * kVecsPerRow) * 4;
      if (q < kVecs) *reinterpret_cast<float4*>(tile + j * S::kRow + (d / DPT) * S::kSeg + d % DPT) = v[i];
    }
    return;
  }
  for (int idx = threadIdx.x; idx < ROWS * S::kDims; idx += blockDim.x) {
    const int j = idx / S::kDims, d = idx - j * S::kDims;
    const int t = row0 + j;
    const float v = (t < T && d < HD) ? src[int64_t(t) * row_stride + d] : 0.0f;
    tile[j * S::kRow + (d / DPT) * S::kSeg + d % DPT] = v;
  }
}

// v[0..DPT) <- segment g of shared-memory row `row`.
template <int DPT, int G>
__device__ __forceinline__ void read_segment(float (&v)[DPT], const float* tile, int row, int g) {
  using S = Seg<DPT, G>;
  const float4* p = reinterpret_cast<const float4*>(tile + row * S::kRow + g * S::kSeg);
#pragma unroll
  for (int d = 0; d < DPT / 4; ++d) {
    const float4 x = p[d];
    v[4 * d] = x.x;
    v[4 * d + 1] = x.y;
    v[4 * d + 2] = x.z;
    v[4 * d + 3] = x.w;
  }
}

// v[0..DPT) <- dimensions [g*DPT, (g+1)*DPT) of the global row at src (zero past HD or if !valid).
template <int DPT>
__device__ __forceinline__ void load_row_segment(float (&v)[DPT], const float* src, int g, int HD, bool valid) {
#pragma unroll
  for (int d = 0; d < DPT; ++d) {
    const int dd = g * DPT + d;
    v[d] = (valid && dd < HD) ? src[dd] : 0.0f;
  }
}

template <int DPT>
__device__ __forceinline__ float dot(const float (&a)[DPT], const float (&b)[DPT]) {
  float s = 0.0f;
#pragma unroll
  for (int d = 0; d < DPT; ++d) s += a[d] * b[d];
  return s;
}

// ---------------- forward ----------------
// grid (B*NH, ceil((q_end - q_begin)/BQ)), kAttnThreads threads = BQ rows x G lanes. Query rows
// [q_begin, q_end) of sequences of T rows; out [B, q_end - q_begin, C]; lse [B,NH,T] unless null. Rows
// of qkv at or past q_end are never read.
template <int DPT, int G, int BK>
__global__ void __launch_bounds__(kAttnThreads)
    attention_forward_kernel(float* out, float* lse, const float* qkv, int T, int NH, int KVH, int HD, float scale,
                             int q_begin, int q_end, bool vec) {
  using S = Seg<DPT, G>;
  constexpr int BQ = kAttnThreads / G;
  __shared__ __align__(16) float ks[BK * S::kRow];
  __shared__ __align__(16) float vs[BK * S::kRow];

  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int q0 = q_begin + (gridDim.y - 1 - blockIdx.y) * BQ;  // the longest (last) query tiles start first
  const int C = NH * HD;
  const int64_t RS = int64_t(NH + 2 * KVH) * HD;
  const float* qbase = qkv + int64_t(b) * T * RS + int64_t(h) * HD;
  const float* kbase = qkv + int64_t(b) * T * RS + int64_t(NH + h / (NH / KVH)) * HD;
  const float* vbase = kbase + int64_t(KVH) * HD;
  const int g = threadIdx.x % G;
  const int t = q0 + threadIdx.x / G;  // this thread's query row (>= q_end: padding, computed, not written)

  float q[DPT], acc[DPT];
  load_row_segment<DPT>(q, qbase + int64_t(t) * RS, g, HD, t < q_end);
#pragma unroll
  for (int d = 0; d < DPT; ++d) acc[d] = 0.0f;
  float m = -INFINITY, l = 0.0f;

  const int kend = min(q0 + BQ, q_end);  // keys [0, kend) are visible to some row of the tile
  for (int k0 = 0; k0 < kend; k0 += BK) {
    __syncthreads();  // everyone is done with the previous tile
    load_tile<DPT, G, BK>(ks, kbase, RS, k0, q_end, HD, vec);
    load_tile<DPT, G, BK>(vs, vbase, RS, k0, q_end, HD, vec);
    __syncthreads();

    // Scores of the tile; every lane runs every j (the butterflies need the whole warp).
    float s[BK];
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < BK; ++j) {
      float kj[DPT];
      read_segment<DPT, G>(kj, ks, j, g);
      const float sj = group_sum<G>(dot<DPT>(q, kj)) * scale;
      s[j] = (k0 + j <= t) ? sj : -INFINITY;  // causal mask (keys >= q_end only occur for rows >= q_end)
      tile_max = fmaxf(tile_max, s[j]);
    }
    if (k0 <= t) {  // else the whole tile is masked for this row: nothing changes
      // m is -inf only before the first tile, which always holds key 0 <= t: m_new is finite.
      const float m_new = fmaxf(m, tile_max);
      const float corr = expf(m - m_new);  // 0 on the first tile (acc and l are 0 then)
      l *= corr;
#pragma unroll
      for (int d = 0; d < DPT; ++d) acc[d] *= corr;
#pragma unroll
      for (int j = 0; j < BK; ++j) {
        const float p = expf(s[j] - m_new);  // masked: exp(-inf) = 0
        l += p;
        const float4* vj = reinterpret_cast<const float4*>(vs + j * S::kRow + g * S::kSeg);
#pragma unroll
        for (int d = 0; d < DPT / 4; ++d) {
          const float4 x = vj[d];
          acc[4 * d] += p * x.x;
          acc[4 * d + 1] += p * x.y;
          acc[4 * d + 2] += p * x.z;
          acc[4 * d + 3] += p * x.w;
        }
      }
      m = m_new;
    }
  }

  if (t < q_end) {
    float* o = out + (int64_t(b) * (q_end - q_begin) + t - q_begin) * C + int64_t(h) * HD;
#pragma unroll
    for (int d = 0; d < DPT; ++d) {
      const int dd = g * DPT + d;
      if (dd < HD) o[dd] = acc[d] / l;
    }
    if (g == 0 && lse) lse[int64_t(bh) * T + t] = m + logf(l);
  }
}

// ---------------- backward ----------------

// D[(b*NH + h)*T + t] = sum_d dout[b,t,h*HD+d] * out[b,t,h*HD+d]; one warp per (b,t,h), in double.
__global__ void attention_row_dot_kernel(float* D, const float* dout, const float* out, int64_t rows, int T, int NH,
                                         int HD) {
  const int lane = threadIdx.x & 31;
  const int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (r >= rows) return;  // uniform per warp
  const int64_t bt = r / NH;
  const int h = int(r % NH);
  const int64_t off = bt * int64_t(NH) * HD + int64_t(h) * HD;
  double s = 0.0;
  for (int d = lane; d < HD; d += 32) s += double(dout[off + d]) * double(out[off + d]);
  s = warp_sum(s);
  if (lane == 0) {
    const int64_t b = bt / T, t = bt % T;
    D[(b * NH + h) * T + t] = float(s);
  }
}

// grid (B*KVH, ceil(T/BKV)), kAttnThreads threads = BKV keys x G lanes. The block sums the dk and dv of
// its keys over the NH/KVH query heads of the key/value head, in ascending order, in registers.
template <int DPT, int G, int BQ>
__global__ void __launch_bounds__(kAttnThreads)
    attention_backward_kv_kernel(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* D,
                                 int T, int NH, int KVH, int HD, float scale, bool vec) {
  using S = Seg<DPT, G>;
  constexpr int BKV = kAttnThreads / G;
  __shared__ __align__(16) float qs[BQ * S::kRow];
  __shared__ __align__(16) float dos[BQ * S::kRow];
  __shared__ float lse_s[BQ], D_s[BQ];

  const int bkv = blockIdx.x, b = bkv / KVH, kvh = bkv % KVH, group = NH / KVH;
  const int k0 = blockIdx.y * BKV;  // the first key tiles see the most queries: they start first
  const int C = NH * HD;
  const int64_t RS = int64_t(NH + 2 * KVH) * HD;
  const float* kbase = qkv + int64_t(b) * T * RS + int64_t(NH + kvh) * HD;
  const int g = threadIdx.x % G;
  const int j = k0 + threadIdx.x / G;  // this thread's key (>= T: padding, computed, not written)

  float kr[DPT], vr[DPT], dk[DPT], dv[DPT];
  load_row_segment<DPT>(kr, kbase + int64_t(j) * RS, g, HD, j < T);
  load_row_segment<DPT>(vr, kbase + int64_t(KVH) * HD + int64_t(j) * RS, g, HD, j < T);
#pragma unroll
  for (int d = 0; d < DPT; ++d) dk[d] = dv[d] = 0.0f;

  for (int h = kvh * group; h < (kvh + 1) * group; ++h) {  // the group's query heads, ascending
    const int64_t bh = int64_t(b) * NH + h;
    const float* qbase = qkv + int64_t(b) * T * RS + int64_t(h) * HD;
    const float* dobase = dout + int64_t(b) * T * C + int64_t(h) * HD;
    const float* lse_bh = lse + bh * T;
    const float* D_bh = D + bh * T;
    for (int i0 = k0; i0 < T; i0 += BQ) {  // queries i >= k0 can see keys of this tile
      __syncthreads();
      load_tile<DPT, G, BQ>(qs, qbase, RS, i0, T, HD, vec);
      load_tile<DPT, G, BQ>(dos, dobase, C, i0, T, HD, vec);
      for (int r = threadIdx.x; r < BQ; r += blockDim.x) {
        const int i = i0 + r;
        lse_s[r] = i < T ? lse_bh[i] : 0.0f;
        D_s[r] = i < T ? D_bh[i] : 0.0f;
      }
      __syncthreads();
#pragma unroll 2
      for (int r = 0; r < BQ; ++r) {
        const int i = i0 + r;
        float qi[DPT], doi[DPT];
        read_segment<DPT, G>(qi, qs, r, g);
        read_segment<DPT, G>(doi, dos, r, g);
        const float sdot = group_sum<G>(dot<DPT>(qi, kr));
        const float pdot = group_sum<G>(dot<DPT>(doi, vr));
        const bool visible = i < T && j <= i;  // j <= i < T also makes the key real
        const float p = visible ? expf(sdot * scale - lse_s[r]) : 0.0f;
        const float ds = p * (pdot - D_s[r]) * scale;
#pragma unroll
        for (int d = 0; d < DPT; ++d) {
          dv[d] += p * doi[d];
          dk[d] += ds * qi[d];
        }
      }
    }
  }

  if (j < T) {
    float* dkrow = dqkv + (int64_t(b) * T + j) * RS + int64_t(NH + kvh) * HD;
    float* dvrow = dkrow + int64_t(KVH) * HD;
#pragma unroll
    for (int d = 0; d < DPT; ++d) {
      const int dd = g * DPT + d;
      if (dd < HD) {
        dkrow[dd] += dk[d];
        dvrow[dd] += dv[d];
      }
    }
  }
}

// grid (B*NH, ceil(T/BQ)), kAttnThreads threads = BQ query rows x G lanes.
template <int DPT, int G, int BK>
__global__ void __launch_bounds__(kAttnThreads)
    attention_backward_q_kernel(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* D,
                                int T, int NH, int KVH, int HD, float scale, bool vec) {
  using S = Seg<DPT, G>;
  constexpr int BQ = kAttnThreads / G;
  __shared__ __align__(16) float ks[BK * S::kRow];
  __shared__ __align__(16) float vs[BK * S::kRow];

  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * BQ;  // the longest (last) query tiles start first
  const int C = NH * HD;
  const int64_t RS = int64_t(NH + 2 * KVH) * HD;
  const float* qbase = qkv + int64_t(b) * T * RS + int64_t(h) * HD;
  const float* kbase = qkv + int64_t(b) * T * RS + int64_t(NH + h / (NH / KVH)) * HD;
  const int g = threadIdx.x % G;
  const int i = q0 + threadIdx.x / G;  // this thread's query row (>= T: padding)
  const bool valid = i < T;

  float qi[DPT], doi[DPT], dq[DPT];
  load_row_segment<DPT>(qi, qbase + int64_t(i) * RS, g, HD, valid);
  load_row_segment<DPT>(doi, dout + (int64_t(b) * T + i) * C + int64_t(h) * HD, g, HD, valid);
#pragma unroll
  for (int d = 0; d < DPT; ++d) dq[d] = 0.0f;
  const float lse_i = valid ? lse[int64_t(bh) * T + i] : 0.0f;
  const float D_i = valid ? D[int64_t(bh) * T + i] : 0.0f;

  const int kend = min(q0 + BQ, T);
  for (int k0 = 0; k0 < kend; k0 += BK) {
    __syncthreads();
    load_tile<DPT, G, BK>(ks, kbase, RS, k0, T, HD, vec);
    load_tile<DPT, G, BK>(vs, kbase + int64_t(KVH) * HD, RS, k0, T, HD, vec);
    __syncthreads();
#pragma unroll 2
    for (int jj = 0; jj < BK; ++jj) {
      const int j = k0 + jj;
      float kj[DPT], vj[DPT];
      read_segment<DPT, G>(kj, ks, jj, g);
      read_segment<DPT, G>(vj, vs, jj, g);
      const float sdot = group_sum<G>(dot<DPT>(qi, kj));
      const float pdot = group_sum<G>(dot<DPT>(doi, vj));
      const bool visible = valid && j <= i;
      const float p = visible ? expf(sdot * scale - lse_i) : 0.0f;
      const float ds = p * (pdot - D_i) * scale;
#pragma unroll
      for (int d = 0; d < DPT; ++d) dq[d] += ds * kj[d];
    }
  }

  if (valid) {
    float* dqrow = dqkv + (int64_t(b) * T + i) * RS + int64_t(h) * HD;
#pragma unroll
    for (int d = 0; d < DPT; ++d) {
      const int dd = g * DPT + d;
      if (dd < HD) dqrow[dd] += dq[d];
    }
  }
}

float attention_scale(int64_t HD) { return float(1.0 / std::sqrt(double(HD))); }

void check_shape(const char* op, int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HD) {
  check_attention_heads(op, NH, KVH);
  TRIDENT_CHECK(HD >= 1 && HD <= kMaxHeadDim, "{}: head size {} not supported by the CUDA backend (1..{})", op, HD,
                kMaxHeadDim);
  // grid.x = B*NH, grid.y = T / (rows per block, at least 16) must fit; int indices inside a head.
  TRIDENT_CHECK(B * NH < (int64_t(1) << 31) && ceil_div(T, 16) <= 65535 && (NH + 2 * KVH) * HD < (int64_t(1) << 31),
                "{}: shape B={} T={} NH={} KVH={} HD={} too large", op, B, T, NH, KVH, HD);
}

// Whether the tiles of these operands can be loaded as 16-byte vectors (load_tile): HD a multiple of 4
// makes every row start and head offset a multiple of 16 bytes past an aligned base.
bool vector_tiles(int64_t HD, const float* a, const float* b) {
  return HD % 4 == 0 && aligned16(a) && aligned16(b);
}

template <int DPT, int G, int BK>
void launch_forward(cudaStream_t stream, float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t NH,
                    int64_t KVH, int64_t HD, int64_t q_begin, int64_t q_count) {
  constexpr int BQ = kAttnThreads / G;
  const dim3 grid(unsigned(B * NH), unsigned(ceil_div(q_count, BQ)));
  TRIDENT_CUDA_CHECK(launch(attention_forward_kernel<DPT, G, BK>, grid, kAttnThreads, 0, stream,
      out, lse, qkv, int(T), int(NH), int(KVH), int(HD), attention_scale(HD), int(q_begin), int(q_begin + q_count),
      vector_tiles(HD, qkv, qkv)));
}

// Forward over query rows [q_begin, q_begin + q_count): 32 dimensions per lane (one butterfly step per
// score at HD 64), 16 for tiny heads.
void forward_rows(const char* op, cudaStream_t stream, float* out, float* lse, const float* qkv, int64_t B,
                  int64_t T, int64_t NH, int64_t KVH, int64_t HD, int64_t q_begin, int64_t q_count) {
  check_attention_heads(op, NH, KVH);
  if (B <= 0 || q_count <= 0) return;
  check_shape(op, B, T, NH, KVH, HD);
  if (HD <= 16)
    launch_forward<16, 1, 32>(stream, out, lse, qkv, B, T, NH, KVH, HD, q_begin, q_count);
  else if (HD <= 32)
    launch_forward<32, 1, 32>(stream, out, lse, qkv, B, T, NH, KVH, HD, q_begin, q_count);
  else if (HD <= 64)
    launch_forward<32, 2, 32>(stream, out, lse, qkv, B, T, NH, KVH, HD, q_begin, q_count);
  else
    launch_forward<32, 4, 32>(stream, out, lse, qkv, B, T, NH, KVH, HD, q_begin, q_count);
}

template <int DPT, int G, int BQ>
void launch_backward(cudaStream_t stream, float* dqkv, const float* dout, const float* qkv, const float* lse,
                     const float* D, int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HD) {
  constexpr int rows_per_block = kAttnThreads / G;  // keys per dK/dV block, queries per dQ block
  const unsigned tiles = unsigned(ceil_div(T, rows_per_block));
  const float scale = attention_scale(HD);
  const bool vec = vector_tiles(HD, qkv, dout);
  TRIDENT_CUDA_CHECK(launch(attention_backward_kv_kernel<DPT, G, BQ>, dim3(unsigned(B * KVH), tiles), kAttnThreads,
      0, stream, dqkv, dout, qkv, lse, D, int(T), int(NH), int(KVH), int(HD), scale, vec));
  TRIDENT_CUDA_CHECK(launch(attention_backward_q_kernel<DPT, G, BQ>, dim3(unsigned(B * NH), tiles), kAttnThreads, 0,
      stream, dqkv, dout, qkv, lse, D, int(T), int(NH), int(KVH), int(HD), scale, vec));
}

}  // namespace

void attention_forward(cudaStream_t stream, float* out, float* lse, const float* qkv, int64_t B, int64_t T,
                       int64_t NH, int64_t KVH, int64_t HD) {
  forward_rows("attention_forward", stream, out, lse, qkv, B, T, NH, KVH, HD, 0, T);
}

void attention_forward_rows(cudaStream_t stream, float* out, const float* qkv, int64_t B, int64_t T, int64_t NH,
                            int64_t KVH, int64_t HD, int64_t q_begin, int64_t q_count) {
  TRIDENT_CHECK(attention_rows_valid(T, q_begin, q_count), "attention_forward_rows: rows [{}, {}) outside [0, {})",
                q_begin, q_begin + q_count, T);
  forward_rows("attention_forward_rows", stream, out, nullptr, qkv, B, T, NH, KVH, HD, q_begin, q_count);
}

void attention_backward(cudaStream_t stream, DeviceAllocator& alloc, float* dqkv, const float* dout,
                        const float* qkv, const float* out, const float* lse, int64_t B, int64_t T, int64_t NH,
                        int64_t KVH, int64_t HD) {
  check_attention_heads("attention_backward", NH, KVH);
  if (B <= 0 || T <= 0) return;
  check_shape("attention_backward", B, T, NH, KVH, HD);
  const int64_t rows = B * T * NH;
  auto* D = static_cast<float*>(alloc.allocate(rows * int64_t(sizeof(float))));
  constexpr int kRowDotWarps = 8;
  TRIDENT_CUDA_CHECK(launch(attention_row_dot_kernel, unsigned(ceil_div(rows, kRowDotWarps)), kRowDotWarps * 32, 0,
      stream, D, dout, out, rows, int(T), int(NH), int(HD)));
  // Backward: 16 dimensions per lane (four operand rows live in registers), tiles of 32 rows.
  if (HD <= 16)
    launch_backward<16, 1, 32>(stream, dqkv, dout, qkv, lse, D, B, T, NH, KVH, HD);
  else if (HD <= 32)
    launch_backward<16, 2, 32>(stream, dqkv, dout, qkv, lse, D, B, T, NH, KVH, HD);
  else if (HD <= 64)
    launch_backward<16, 4, 32>(stream, dqkv, dout, qkv, lse, D, B, T, NH, KVH, HD);
  else
    launch_backward<16, 8, 32>(stream, dqkv, dout, qkv, lse, D, B, T, NH, KVH, HD);
  alloc.release(D);  // stream-ordered
}

}  // namespace trident::cuda
