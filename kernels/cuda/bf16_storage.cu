// bf16 storage of activations (Kernels::round_to_bf16, unpack_bf16) and bf16 communication buffers
// (pack_bf16), rounded as the bf16 GEMMs round.
#include "cuda/bf16.cuh"
#include "cuda/check.cuh"
#include "cuda/ops.cuh"

namespace trident::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void round_to_bf16_kernel(float* x, uint16_t* packed, int64_t n) {
  TRIDENT_GRID_STRIDE(i, n) {
    const uint16_t bits = bf16_bits(x[i]);
    x[i] = bf16_value(bits);
    if (packed) packed[i] = bits;
  }
}

__global__ void pack_bf16_kernel(const float* x, uint16_t* packed, int64_t n) {
  TRIDENT_GRID_STRIDE(i, n) packed[i] = bf16_bits(x[i]);
}

__global__ void unpack_bf16_kernel(float* out, const uint16_t* packed, int64_t n) {
  TRIDENT_GRID_STRIDE(i, n) out[i] = bf16_value(packed[i]);
}

}  // namespace

void round_to_bf16(cudaStream_t stream, float* x, uint16_t* packed, int64_t n) {
  if (n <= 0) return;
  TRIDENT_CUDA_CHECK(launch(round_to_bf16_kernel, grid_for(n, kThreads), kThreads, 0, stream, x, packed, n));
}

void pack_bf16(cudaStream_t stream, const float* x, uint16_t* packed, int64_t n) {
  if (n <= 0) return;
  TRIDENT_CUDA_CHECK(launch(pack_bf16_kernel, grid_for(n, kThreads), kThreads, 0, stream, x, packed, n));
}

void unpack_bf16(cudaStream_t stream, float* out, const uint16_t* packed, int64_t n) {
  if (n <= 0) return;
  TRIDENT_CUDA_CHECK(launch(unpack_bf16_kernel, grid_for(n, kThreads), kThreads, 0, stream, out, packed, n));
}

}  // namespace trident::cuda
