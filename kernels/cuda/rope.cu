// Rotary position embedding, forward and its transpose, in place on the q and k heads of a qkv tensor
// (row: q [NH,HD] | k [KVH,HD] | v [KVH,HD]; the NH + KVH heads to rotate are the row's first
// (NH+KVH)*HD floats), the same formulas as the Kokkos backend (kernels/kokkos/rope.hpp). One thread
// per rotated pair (b, t, head, i < HD/2), grid-stride; consecutive threads take consecutive i, so a
// warp reads and writes contiguous runs of both halves of a head. No reduction: nothing to order.
#include "cuda/check.cuh"
#include "cuda/ops.cuh"

namespace trident::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void rope_kernel(float* x, const float* table, int64_t T, int64_t NH, int64_t KVH, int64_t HD,
                            int64_t t_begin, int64_t t_count, int64_t pairs, float sign) {
  const int64_t half = HD / 2, heads = NH + KVH, row = (NH + 2 * KVH) * HD;
  TRIDENT_GRID_STRIDE(idx, pairs) {
    const int64_t i = idx % half, w = idx / half;  // w: (b, t, head)
    const int64_t head = w % heads, bt = w / heads;
    const int64_t b = bt / t_count, t = t_begin + bt % t_count;
    float* p = x + (b * T + t) * row + head * HD;
    const float c = table[(t * half + i) * 2], s = sign * table[(t * half + i) * 2 + 1];
    const float x0 = p[i], x1 = p[i + half];
    p[i] = x0 * c - x1 * s;
    p[i + half] = x1 * c + x0 * s;
  }
}

}  // namespace

void rope_apply(cudaStream_t stream, float* x, const float* table, int64_t B, int64_t T, int64_t NH, int64_t KVH,
                int64_t HD, int64_t t_begin, int64_t t_count, float sign) {
  const int64_t pairs = B * t_count * (NH + KVH) * (HD / 2);
  if (pairs <= 0) return;
  TRIDENT_CUDA_CHECK(launch(rope_kernel, grid_for(pairs, kThreads), kThreads, 0, stream, x, table, T, NH, KVH, HD,
      t_begin, t_count, pairs, sign));
}

}  // namespace trident::cuda
