#pragma once
// AdamW exactly as torch.optim.AdamW (single-tensor path, PyTorch 1.13), element by element:
//   p *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//   p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps),  bc1 = 1 - b1^step, bc2 = 1 - b2^step,
// with the scalar factors (bias corrections, step size) computed in double as Python does.
#include "kokkos/common.hpp"

// The loop body runs on raw restrict pointers in host-sized chunks (parallel_chunks) so that it can
// vectorise. With GCC's default -fmath-errno, sqrtf keeps a scalar errno branch that still blocks
// it; building this file with -fno-math-errno (no result changes: v >= 0) vectorises it.

namespace trident::kk {

template <class ES>
void adamw_update(const ES& space, Vec<ES> param, CVec<ES> grad, Vec<ES> m, Vec<ES> v, float lr, float beta1,
                  float beta2, float eps, float weight_decay, int64_t step) {
  const double bc1 = 1.0 - kmath::pow(double(beta1), double(step));
  const double bc2 = 1.0 - kmath::pow(double(beta2), double(step));
  const float decay = float(1.0 - double(lr) * double(weight_decay));
  const float step_size = float(double(lr) / bc1);
  const float bc2_sqrt = float(kmath::sqrt(bc2));
  const float one_minus_b1 = float(1.0 - double(beta1));
  const float one_minus_b2 = float(1.0 - double(beta2));
  float* p_ = param.data();
  const float* g_ = grad.data();
  float* m_ = m.data();
  float* v_ = v.data();
  parallel_chunks("trident::adamw_update", space, param.extent(0), KOKKOS_LAMBDA(int64_t begin, int64_t end) {
    float* KOKKOS_RESTRICT p = p_;
    const float* KOKKOS_RESTRICT g = g_;
    float* KOKKOS_RESTRICT mm = m_;
    float* KOKKOS_RESTRICT vv = v_;
    for (int64_t i = begin; i < end; ++i) {
      const float gi = g[i];
      const float mi = mm[i] * beta1 + one_minus_b1 * gi;
      const float vi = vv[i] * beta2 + one_minus_b2 * gi * gi;
      mm[i] = mi;
      vv[i] = vi;
      const float denom = kmath::sqrt(vi) / bc2_sqrt + eps;
      p[i] = p[i] * decay - step_size * mi / denom;  // torch's addcdiv order: (value * m) / denom
    }
  });
}

}  // namespace trident::kk
