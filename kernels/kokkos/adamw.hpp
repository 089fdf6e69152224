#pragma once
// AdamW exactly as torch.optim.AdamW (single-tensor path, PyTorch 1.13), element by element:
//   p *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//   p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps),  bc1 = 1 - b1^step, bc2 = 1 - b2^step,
// with the scalar factors (bias corrections, step size) computed in double as Python does. One pass
// over all of an optimizer's tensors: wd is the weight decay of the segment an element falls in.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels.hpp"
#include "kokkos/common.hpp"
#include "kokkos/matmul.hpp"

// The loop body runs on raw restrict pointers in host-sized chunks (parallel_chunks) so that it can
// vectorise. With GCC's default -fmath-errno, sqrtf keeps a scalar errno branch that still blocks
// it; building this file with -fno-math-errno (no result changes: v >= 0) vectorises it.

namespace trident::kk {

// Host execution spaces only: the segment table is read from host memory.
template <class ES>
void adamw_update(const ES& space, Vec<ES> param, CVec<ES> grad, Vec<ES> m, Vec<ES> v,
                  const std::vector<AdamWSegment>& segments, const AdamWStep& h, float* working) {
  const double bc1 = 1.0 - kmath::pow(double(h.beta1), double(h.step));
  const double bc2 = 1.0 - kmath::pow(double(h.beta2), double(h.step));
  const float step_size = float(double(h.lr) / bc1);
  const float bc2_sqrt = float(kmath::sqrt(bc2));
  const float beta1 = h.beta1, beta2 = h.beta2, eps = h.eps;
  const float one_minus_b1 = float(1.0 - double(beta1));
  const float one_minus_b2 = float(1.0 - double(beta2));
  const int64_t n = param.extent(0);
  // Segment s covers [starts[s], starts[s + 1]) and decays by decays[s].
  std::vector<int64_t> starts;
  std::vector<float> decays;
  for (const auto& s : segments) {
    starts.push_back(s.begin);
    decays.push_back(float(1.0 - double(h.lr) * double(s.weight_decay)));
  }
  starts.push_back(n);
  const int64_t* starts_ = starts.data();
  const float* decays_ = decays.data();
  const int64_t last_segment = int64_t(decays.size()) - 1;
  float* p_ = param.data();
  const float* g_ = grad.data();
  float* m_ = m.data();
  float* v_ = v.data();
  float* w_ = working;
  parallel_chunks("trident::adamw_update", space, n, KOKKOS_LAMBDA(int64_t begin, int64_t end) {
    int64_t s = int64_t(std::upper_bound(starts_, starts_ + last_segment + 1, begin) - starts_) - 1;
    while (begin < end) {
      const int64_t stop = std::min(end, starts_[s + 1]);
      const float decay = decays_[s];
      float* KOKKOS_RESTRICT p = p_;
      const float* KOKKOS_RESTRICT g = g_;
      float* KOKKOS_RESTRICT mm = m_;
      float* KOKKOS_RESTRICT vv = v_;
      for (int64_t i = begin; i < stop; ++i) {
        const float gi = g[i];
        const float mi = mm[i] * beta1 + one_minus_b1 * gi;
        const float vi = vv[i] * beta2 + one_minus_b2 * gi * gi;
        mm[i] = mi;
        vv[i] = vi;
        const float denom = kmath::sqrt(vi) / bc2_sqrt + eps;
        p[i] = p[i] * decay - step_size * mi / denom;  // torch's addcdiv order: (value * m) / denom
      }
      if (w_)
        for (int64_t i = begin; i < stop; ++i) w_[i] = round_mantissa(p_[i], 16);
      begin = stop;
      ++s;
    }
  });
}

}  // namespace trident::kk
