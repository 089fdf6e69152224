// Elementwise ops and the deterministic device-side sums (gradient norm, loss sums).
#include "cuda/check.cuh"
#include "cuda/ops.cuh"
#include "cuda/reduce.cuh"

namespace trident::cuda {

namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void fill_kernel(T* x, T value, int64_t n) {
  TRIDENT_GRID_STRIDE(i, n) x[i] = value;
}

// out may alias a or b: each element is read before it is written, by the same thread.
__global__ void add_kernel(float* out, const float* a, const float* b, int64_t n) {
  TRIDENT_GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

__global__ void accumulate_kernel(float* y, const float* x, int64_t n) {
  TRIDENT_GRID_STRIDE(i, n) y[i] += x[i];
}

__global__ void scale_kernel(float* x, float s, int64_t n) {
  TRIDENT_GRID_STRIDE(i, n) x[i] *= s;
}

// Sum (of squares) in two passes. Pass 1: `blocks` blocks (a function of n only, at most
// kSumMaxBlocks) of kThreads threads; thread g adds x[g], x[g + G], x[g + 2G], ... (G = total
// threads) in double, the block reduces in its fixed order, partial[block] = result.
// Pass 2: one block adds partial[0..blocks) in a fixed order onto *acc.
__global__ void sum_partials_kernel(double* partial, const float* x, int64_t n, bool square) {
  __shared__ double shared[32];
  double s = 0.0;
  TRIDENT_GRID_STRIDE(i, n) {
    const double v = x[i];
    s += square ? v * v : v;
  }
  s = block_sum(s, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sum_finish_kernel(double* acc, const double* partial, int blocks) {
  __shared__ double shared[32];
  double s = 0.0;
  for (int i = threadIdx.x; i < blocks; i += blockDim.x) s += partial[i];
  s = block_sum(s, shared);
  if (threadIdx.x == 0) acc[0] += s;
}

}  // namespace

void fill(cudaStream_t stream, float* x, float value, int64_t n) {
  if (n <= 0) return;
  fill_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(x, value, n);
  TRIDENT_CUDA_CHECK_LAUNCH();
}

void fill_double(cudaStream_t stream, double* x, double value, int64_t n) {
  if (n <= 0) return;
  fill_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(x, value, n);
  TRIDENT_CUDA_CHECK_LAUNCH();
}

void add(cudaStream_t stream, float* out, const float* a, const float* b, int64_t n) {
  if (n <= 0) return;
  add_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(out, a, b, n);
  TRIDENT_CUDA_CHECK_LAUNCH();
}

void accumulate(cudaStream_t stream, float* y, const float* x, int64_t n) {
  if (n <= 0) return;
  accumulate_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(y, x, n);
  TRIDENT_CUDA_CHECK_LAUNCH();
}

void scale(cudaStream_t stream, float* x, float s, int64_t n) {
  if (n <= 0) return;
  scale_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(x, s, n);
  TRIDENT_CUDA_CHECK_LAUNCH();
}

void sum_into(cudaStream_t stream, double* acc, const float* x, int64_t n, bool square, double* partials) {
  if (n <= 0) return;  // adds nothing
  const int blocks = int(grid_for(n, kThreads, kSumMaxBlocks));
  sum_partials_kernel<<<blocks, kThreads, 0, stream>>>(partials, x, n, square);
  TRIDENT_CUDA_CHECK_LAUNCH();
  sum_finish_kernel<<<1, kSumMaxBlocks, 0, stream>>>(acc, partials, blocks);
  TRIDENT_CUDA_CHECK_LAUNCH();
}

}  // namespace trident::cuda
