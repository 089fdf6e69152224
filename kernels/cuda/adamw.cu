// AdamW exactly as torch.optim.AdamW and the Kokkos backend (kernels/kokkos/adamw.hpp):
//   p *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//   p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps),  bc1 = 1 - b1^step, bc2 = 1 - b2^step,
// with the scalar factors computed on the host in double, as there. The element update uses the
// explicitly rounded intrinsics (__fmul_rn, __fadd_rn, ...) so that nvcc does not contract it into
// FMAs: each operation rounds once, as in the host build (x86-64 without -march: no FMA), so the
// CUDA and Kokkos backends give the same bits for the same inputs.
#include <cmath>

#include "cuda/check.cuh"
#include "cuda/ops.cuh"

namespace trident::cuda {

namespace {

constexpr int kThreads = 256;

struct AdamWScalars {
  float beta1, beta2, one_minus_b1, one_minus_b2, eps, decay, step_size, bc2_sqrt;
};

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n, AdamWScalars s) {
  TRIDENT_GRID_STRIDE(i, n) {
    const float g = grad[i];
    const float mi = __fadd_rn(__fmul_rn(m[i], s.beta1), __fmul_rn(s.one_minus_b1, g));
    const float vi = __fadd_rn(__fmul_rn(v[i], s.beta2), __fmul_rn(__fmul_rn(s.one_minus_b2, g), g));
    m[i] = mi;
    v[i] = vi;
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bc2_sqrt), s.eps);
    // torch's addcdiv order: (step_size * m) / denom
    param[i] = __fsub_rn(__fmul_rn(param[i], s.decay), __fdiv_rn(__fmul_rn(s.step_size, mi), denom));
  }
}

}  // namespace

void adamw_update(cudaStream_t stream, float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int64_t step) {
  if (n <= 0) return;
  const double bc1 = 1.0 - std::pow(double(beta1), double(step));
  const double bc2 = 1.0 - std::pow(double(beta2), double(step));
  AdamWScalars s;
  s.beta1 = beta1;
  s.beta2 = beta2;
  s.one_minus_b1 = float(1.0 - double(beta1));
  s.one_minus_b2 = float(1.0 - double(beta2));
  s.eps = eps;
  s.decay = float(1.0 - double(lr) * double(weight_decay));
  s.step_size = float(double(lr) / bc1);
  s.bc2_sqrt = float(std::sqrt(bc2));
  TRIDENT_CUDA_CHECK(launch(adamw_kernel, grid_for(n, kThreads), kThreads, 0, stream, param, grad, m, v, n, s));
}

}  // namespace trident::cuda
