#pragma once
// Deterministic reductions used by several kernels (device code; include from .cu files only).
//
// Determinism: every reduction here has an order fixed by the launch configuration, and the launch
// configurations depend only on the problem sizes: warp reductions are xor butterflies (each lane
// combines with its partner at distances 16, 8, ..., 1; a + b == b + a bitwise, so all lanes end
// with the same bits), block reductions are per-warp butterflies followed by a butterfly over the
// warp results, and cross-block sums go through a scratch buffer read in a fixed order. No atomics.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/allocator.cuh"
#include "cuda/check.cuh"

namespace trident::cuda {

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Max that ignores NaN in the incoming value the same way as `x > m ? x : m`.
__device__ __forceinline__ float max_keep(float m, float x) { return x > m ? x : m; }

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = max_keep(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block, returned to every thread. blockDim.x must be a multiple of 32 and every
// thread of the block must call it (it synchronises). `shared` holds 32 values.
template <class T>
__device__ T block_sum(T v, T* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // a previous call's readers of `shared` are done
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  // Every warp reduces the same 32 values the same way: all threads get the same bits.
  return warp_sum(lane < warps ? shared[lane] : T(0));
}

__device__ inline float block_max(float v, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  return warp_max(lane < warps ? shared[lane] : -INFINITY);
}

// ---- column sums of a [N, C] row-major quantity, in two passes, in double ----
// Pass 1: block (x = column tile of 32, y = chunk of rows) sums f(r, c) over its rows: thread
// (tx, ty) takes rows r0+ty, r0+ty+8, ... (coalesced: a warp reads 32 consecutive columns of one
// row), then thread ty = 0 adds the 8 row lanes in order and writes partial[k][chunk][c].
// Pass 2: one thread per column adds the chunk partials in chunk order: out[k][c] += float(sum).
// The chunking depends only on N, so the result does too.
constexpr int kColTile = 32;
constexpr int kColRowLanes = 8;
constexpr int64_t kColMaxChunks = 1024;

inline int64_t column_rows_per_chunk(int64_t N) { return std::max<int64_t>(256, ceil_div(N, kColMaxChunks)); }

template <int K, class F>
__global__ void __launch_bounds__(kColTile* kColRowLanes)
    column_partials_kernel(double* partial, F f, int64_t N, int64_t C, int64_t rows_per_chunk) {
  __shared__ double sh[K][kColRowLanes][kColTile + 1];
  const int64_t c = int64_t(blockIdx.x) * kColTile + threadIdx.x;
  const int64_t r0 = int64_t(blockIdx.y) * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
  double acc[K];
#pragma unroll
  for (int k = 0; k < K; ++k) acc[k] = 0.0;
  if (c < C)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kColRowLanes) f(r, c, acc);
#pragma unroll
  for (int k = 0; k < K; ++k) sh[k][threadIdx.y][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      double s = 0.0;
      for (int l = 0; l < kColRowLanes; ++l) s += sh[k][l][threadIdx.x];
      partial[(int64_t(k) * gridDim.y + blockIdx.y) * C + c] = s;
    }
  }
}

template <class T>
__global__ void column_finish_kernel(T* out, const double* partial, int64_t chunks, int64_t C) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double s = 0.0;
  for (int64_t k = 0; k < chunks; ++k) s += partial[k * C + c];
  out[c] += T(s);
}

// outs[k][c] += sum_r f(r, c, acc)[k] for each k with outs[k] != nullptr. f(r, c, double* acc)
// adds its K terms of row r, column c into acc[0..K). Scratch comes from (and returns to) alloc.
template <int K, class F>
void column_sums(cudaStream_t stream, DeviceAllocator& alloc, float* const (&outs)[K], F f, int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return;
  const int64_t rows_per_chunk = column_rows_per_chunk(N);
  const int64_t chunks = ceil_div(N, rows_per_chunk);
  double* partial = static_cast<double*>(alloc.allocate(K * chunks * C * int64_t(sizeof(double))));
  const dim3 grid(unsigned(ceil_div(C, kColTile)), unsigned(chunks)), block(kColTile, kColRowLanes);
  TRIDENT_CUDA_CHECK(launch(column_partials_kernel<K, F>, grid, block, 0, stream, partial, f, N, C, rows_per_chunk));
  for (int k = 0; k < K; ++k) {
    if (outs[k] == nullptr) continue;
    TRIDENT_CUDA_CHECK(launch(column_finish_kernel<float>, unsigned(ceil_div(C, 256)), 256, 0, stream,
        outs[k], partial + k * chunks * C, chunks, C));
  }
  alloc.release(partial);  // stream-ordered: the next user of the block runs after these kernels
}

}  // namespace trident::cuda
