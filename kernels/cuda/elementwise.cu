// Elementwise ops and the deterministic device-side sums (gradient norm, loss sums).
#include "cuda/check.cuh"
#include "cuda/ops.cuh"
#include "cuda/reduce.cuh"

namespace trident::cuda {

namespace {

constexpr int kThreads = 256;
// A sum's thread reads at least this many elements: a block's two reductions (a butterfly per warp,
// then one over the warps) then cost little against its reads, for the small tensors of a model too.
constexpr int64_t kSumPerThread = 8;

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

__global__ void clip_coefficient_kernel(float* coef, const double* square_sums, double max_norm) {
  const double c = max_norm / (sqrt(square_sums[0] + square_sums[1]) + 1e-6);
  coef[0] = c >= 1.0 ? 1.0f : float(c);
}

__global__ void scale_by_kernel(float* x, const float* coef, int64_t n) {
  const float s = *coef;
  if (s == 1.0f) return;
  TRIDENT_GRID_STRIDE(i, n) x[i] *= s;
}

// Sum (of squares) in two passes. Pass 1: `blocks` blocks (a function of n only: at least
// kSumPerThread elements per thread, at most kSumMaxBlocks blocks) of up to kThreads threads (whole
// warps; fewer for a small tensor); thread g adds
// x[g], x[g + G], x[g + 2G], ... (G = total threads) in double, the block reduces in its fixed order,
// partial[block] = result. Pass 2: one block of `blocks` threads rounded up to a warp adds
// partial[0..blocks) in a fixed order onto *acc.
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
  TRIDENT_CUDA_CHECK(launch(fill_kernel<float>, grid_for(n, kThreads), kThreads, 0, stream, x, value, n));
}

void fill_double(cudaStream_t stream, double* x, double value, int64_t n) {
  if (n <= 0) return;
  TRIDENT_CUDA_CHECK(launch(fill_kernel<double>, grid_for(n, kThreads), kThreads, 0, stream, x, value, n));
}

void add(cudaStream_t stream, float* out, const float* a, const float* b, int64_t n) {
  if (n <= 0) return;
  TRIDENT_CUDA_CHECK(launch(add_kernel, grid_for(n, kThreads), kThreads, 0, stream, out, a, b, n));
}

void accumulate(cudaStream_t stream, float* y, const float* x, int64_t n) {
  if (n <= 0) return;
  TRIDENT_CUDA_CHECK(launch(accumulate_kernel, grid_for(n, kThreads), kThreads, 0, stream, y, x, n));
}

void scale(cudaStream_t stream, float* x, float s, int64_t n) {
  if (n <= 0) return;
  TRIDENT_CUDA_CHECK(launch(scale_kernel, grid_for(n, kThreads), kThreads, 0, stream, x, s, n));
}

void clip_coefficient(cudaStream_t stream, float* coef, const double* square_sums, double max_norm) {
  TRIDENT_CUDA_CHECK(launch(clip_coefficient_kernel, 1, 1, 0, stream, coef, square_sums, max_norm));
}

void scale_by(cudaStream_t stream, float* x, const float* coef, int64_t n) {
  if (n <= 0) return;
  TRIDENT_CUDA_CHECK(launch(scale_by_kernel, grid_for(n, kThreads), kThreads, 0, stream, x, coef, n));
}

void sum_into(cudaStream_t stream, double* acc, const float* x, int64_t n, bool square, double* partials) {
  if (n <= 0) return;  // adds nothing
  const int64_t readers = ceil_div(n, kSumPerThread);
  const int threads = int(std::min<int64_t>(kThreads, ceil_div(readers, 32) * 32));
  const int blocks = int(grid_for(readers, threads, kSumMaxBlocks));
  TRIDENT_CUDA_CHECK(launch(sum_partials_kernel, blocks, threads, 0, stream, partials, x, n, square));
  const unsigned finish_threads = unsigned(ceil_div(blocks, 32) * 32);
  TRIDENT_CUDA_CHECK(launch(sum_finish_kernel, 1, finish_threads, 0, stream, acc, partials, blocks));
}

}  // namespace trident::cuda
