// The MLP activations, forward and backward (accumulating), the same formulas as the Kokkos backend
// (kernels/kokkos/gelu.hpp). GELU, tanh approximation: 0.5 (1 + tanh u) evaluated as
// sigmoid(2u) = 1 / (1 + exp(-2u)). SwiGLU: inp [N, 2F] = gate | up, out = silu(gate) * up.
#include "cuda/check.cuh"
#include "cuda/ops.cuh"

namespace trident::cuda {

namespace {

constexpr int kThreads = 256;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCube = 0.044715f;

__global__ void gelu_forward_kernel(float* out, const float* inp, int64_t n, OutputRounding rounding) {
  TRIDENT_GRID_STRIDE(i, n) {
    const float x = inp[i];
    const float u = kGeluScale * (x + kGeluCube * x * x * x);
    out[i] = rounding(x / (1.0f + expf(-2.0f * u)), i);  // x * sigmoid(2u); x / inf = -0 far left
  }
}

// d gelu/dx = s + 2 x s (1 - s) u', s = sigmoid(2u), s (1 - s) = e s^2 with e = exp(-2u) (clamped
// at e^80 so that e s^2 is never inf * 0), u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, int64_t n, GradWrite write) {
  TRIDENT_GRID_STRIDE(i, n) {
    const float x = inp[i];
    const float u = kGeluScale * (x + kGeluCube * x * x * x);
    const float a = -2.0f * u;
    const float e = expf(a < 80.0f ? a : 80.0f);
    const float s = 1.0f / (1.0f + e);
    const float du = kGeluScale * (1.0f + 3.0f * kGeluCube * x * x);
    const float local = s + 2.0f * x * (e * s * s) * du;
    const float g = local * dout[i];
    dinp[i] = write == GradWrite::Overwrite ? g : dinp[i] + g;
  }
}

// One thread per (row, column) of the [N, F] output, grid-stride; idx / F picks the row.
__global__ void swiglu_forward_kernel(float* out, const float* inp, int64_t N, int64_t F, OutputRounding rounding) {
  TRIDENT_GRID_STRIDE(idx, N * F) {
    const int64_t i = idx / F, j = idx - i * F;
    const float g = inp[i * 2 * F + j], u = inp[i * 2 * F + F + j];
    out[idx] = rounding(g / (1.0f + expf(-g)) * u, idx);
  }
}

// d/dup = silu(g); d/dgate = up (s + silu(g) (1 - s)), s = sigmoid(g).
__global__ void swiglu_backward_kernel(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F,
                                       GradWrite write) {
  TRIDENT_GRID_STRIDE(idx, N * F) {
    const int64_t i = idx / F, j = idx - i * F;
    const float g = inp[i * 2 * F + j], u = inp[i * 2 * F + F + j], dy = dout[idx];
    const float s = 1.0f / (1.0f + expf(-g));
    const float silu = g * s;
    const float dgate = dy * u * (s + silu * (1.0f - s)), dup = dy * silu;
    float* gate = dinp + i * 2 * F + j;
    float* up = gate + F;
    *gate = write == GradWrite::Overwrite ? dgate : *gate + dgate;
    *up = write == GradWrite::Overwrite ? dup : *up + dup;
  }
}

}  // namespace

void gelu_forward(cudaStream_t stream, float* out, const float* inp, int64_t n, OutputRounding rounding) {
  if (n <= 0) return;
  TRIDENT_CUDA_CHECK(launch(gelu_forward_kernel, grid_for(n, kThreads), kThreads, 0, stream, out, inp, n, rounding));
}

void gelu_backward(cudaStream_t stream, float* dinp, const float* inp, const float* dout, int64_t n, GradWrite write) {
  if (n <= 0) return;
  TRIDENT_CUDA_CHECK(
      launch(gelu_backward_kernel, grid_for(n, kThreads), kThreads, 0, stream, dinp, inp, dout, n, write));
}

void swiglu_forward(cudaStream_t stream, float* out, const float* inp, int64_t N, int64_t F, OutputRounding rounding) {
  if (N <= 0 || F <= 0) return;
  TRIDENT_CUDA_CHECK(
      launch(swiglu_forward_kernel, grid_for(N * F, kThreads), kThreads, 0, stream, out, inp, N, F, rounding));
}

void swiglu_backward(cudaStream_t stream, float* dinp, const float* inp, const float* dout, int64_t N, int64_t F,
                     GradWrite write) {
  if (N <= 0 || F <= 0) return;
  TRIDENT_CUDA_CHECK(launch(swiglu_backward_kernel, grid_for(N * F, kThreads), kThreads, 0, stream, dinp, inp, dout,
      N, F, write));
}

}  // namespace trident::cuda
