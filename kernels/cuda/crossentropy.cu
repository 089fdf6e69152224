// Fused softmax cross-entropy in the three phases of kernels.hpp (a TP group reduces between them),
// following kernels/kokkos/crossentropy.hpp. One block per row (grid-stride over rows), with a thread
// per float4 of the row up to 512 (row_threads). Columns are
// read as float4 when the row start is 16-byte aligned, else one float at a time; the thread ->
// column assignment depends only on the row's address and sizes, and the block reductions have a
// fixed order (reduce.cuh), so results are deterministic. Row sums in double as in the reference.
#include <cstdint>

#include "cuda/check.cuh"
#include "cuda/ops.cuh"
#include "cuda/reduce.cuh"

namespace trident::cuda {

namespace {

constexpr int kThreads = 512;  // at most, per row: fewer for short rows (row_threads)
constexpr int64_t kMaxRowBlocks = int64_t(1) << 20;

// f(j, x) for the block's share of columns j < n of `row`.
template <class F>
__device__ __forceinline__ void for_each_column(const float* row, int64_t n, F&& f) {
  int64_t j0 = 0;
  if (aligned16(row)) {
    const int64_t n4 = n / 4;
    const float4* row4 = reinterpret_cast<const float4*>(row);
    for (int64_t q = threadIdx.x; q < n4; q += blockDim.x) {
      const float4 x = row4[q];
      f(4 * q, x.x);
      f(4 * q + 1, x.y);
      f(4 * q + 2, x.z);
      f(4 * q + 3, x.w);
    }
    j0 = 4 * n4;
  }
  for (int64_t j = j0 + threadIdx.x; j < n; j += blockDim.x) f(j, row[j]);
}

// row[j] = f(j, row[j]) for the block's share of columns j < n.
template <class F>
__device__ __forceinline__ void transform_columns(float* row, int64_t n, F&& f) {
  int64_t j0 = 0;
  if (aligned16(row)) {
    const int64_t n4 = n / 4;
    float4* row4 = reinterpret_cast<float4*>(row);
    for (int64_t q = threadIdx.x; q < n4; q += blockDim.x) {
      float4 x = row4[q];
      x.x = f(4 * q, x.x);
      x.y = f(4 * q + 1, x.y);
      x.z = f(4 * q + 2, x.z);
      x.w = f(4 * q + 3, x.w);
      row4[q] = x;
    }
    j0 = 4 * n4;
  }
  for (int64_t j = j0 + threadIdx.x; j < n; j += blockDim.x) row[j] = f(j, row[j]);
}

// 1. rowmax[i] = max_{j < vocab_count} logits[i, j]
__global__ void __launch_bounds__(kThreads)
    xent_row_max_kernel(float* rowmax, const float* logits, int64_t N, int64_t stride, int64_t vocab_count) {
  __shared__ float shared[32];
  for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {  // uniform per block: block_max may sync
    float m = -INFINITY;
    for_each_column(logits + i * stride, vocab_count, [&](int64_t, float x) { m = max_keep(m, x); });
    m = block_max(m, shared);
    if (threadIdx.x == 0) rowmax[i] = m;
  }
}

// 2. sumexp[i] = sum_j exp(logits[i,j] - rowmax[i]) (double); target_logit[i] from this shard or 0.
__global__ void __launch_bounds__(kThreads)
    xent_sumexp_target_kernel(float* sumexp, float* target_logit, const float* logits, const float* rowmax,
                              const int32_t* targets, int64_t vocab_begin, int64_t N, int64_t stride,
                              int64_t vocab_count) {
  __shared__ double shared[32];
  for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
    const float* row = logits + i * stride;
    const float m = rowmax[i];
    double s = 0.0;
    for_each_column(row, vocab_count, [&](int64_t, float x) { s += double(expf(x - m)); });
    s = block_sum(s, shared);
    if (threadIdx.x == 0) {
      sumexp[i] = float(s);
      const int64_t t = int64_t(targets[i]) - vocab_begin;
      target_logit[i] = (t >= 0 && t < vocab_count) ? row[t] : 0.0f;
    }
  }
}

// 3. losses[i] = log(sumexp) + rowmax - target_logit; logits[i, :] = dloss_scale * (softmax - onehot)
//    in place over the whole stride, padding columns (j >= vocab_count) set to 0. A negative target:
//    not scored, loss and gradient row 0.
__global__ void __launch_bounds__(kThreads)
    xent_loss_grad_kernel(float* losses, float* logits, const float* rowmax, const float* sumexp,
                          const float* target_logit, const int32_t* targets, int64_t vocab_begin, float dloss_scale,
                          int64_t N, int64_t stride, int64_t vocab_count) {
  for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
    const float m = rowmax[i], z = sumexp[i];
    const int64_t t = int64_t(targets[i]) - vocab_begin;
    const bool scored = targets[i] >= 0;
    if (threadIdx.x == 0) losses[i] = scored ? float(log(double(z)) + double(m) - double(target_logit[i])) : 0.0f;
    transform_columns(logits + i * stride, stride, [&](int64_t j, float x) {
      if (j >= vocab_count || !scored) return 0.0f;
      const float p = expf(x - m) / z;
      return dloss_scale * (p - (j == t ? 1.0f : 0.0f));
    });
  }
}

unsigned row_blocks(int64_t N) { return unsigned(N < kMaxRowBlocks ? N : kMaxRowBlocks); }

// Threads per row: one per float4 of the row, in whole warps, at most kThreads (a short row, a small
// vocabulary or one TP shard of it, leaves no thread idle through the block reductions).
unsigned row_threads(int64_t columns) {
  return unsigned(std::min<int64_t>(kThreads, std::max<int64_t>(32, ceil_div(ceil_div(columns, 4), 32) * 32)));
}

}  // namespace

void xent_row_max(cudaStream_t stream, float* rowmax, const float* logits, int64_t N, int64_t stride,
                  int64_t vocab_count) {
  if (N <= 0) return;
  TRIDENT_CUDA_CHECK(launch(xent_row_max_kernel, row_blocks(N), row_threads(vocab_count), 0, stream,
      rowmax, logits, N, stride, vocab_count));
}

void xent_sumexp_target(cudaStream_t stream, float* sumexp, float* target_logit, const float* logits,
                        const float* rowmax, const int32_t* targets, int64_t vocab_begin, int64_t N, int64_t stride,
                        int64_t vocab_count) {
  if (N <= 0) return;
  TRIDENT_CUDA_CHECK(launch(xent_sumexp_target_kernel, row_blocks(N), row_threads(vocab_count), 0, stream,
      sumexp, target_logit, logits, rowmax, targets, vocab_begin, N, stride, vocab_count));
}

void xent_loss_grad(cudaStream_t stream, float* losses, float* logits, const float* rowmax, const float* sumexp,
                    const float* target_logit, const int32_t* targets, int64_t vocab_begin, float dloss_scale,
                    int64_t N, int64_t stride, int64_t vocab_count) {
  if (N <= 0) return;
  TRIDENT_CUDA_CHECK(launch(xent_loss_grad_kernel, row_blocks(N), row_threads(stride), 0, stream,
      losses, logits, rowmax, sumexp, target_logit, targets, vocab_begin, dloss_scale, N, stride, vocab_count));
}

}  // namespace trident::cuda
