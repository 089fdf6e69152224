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

struct AdamWConstants {
  float beta1, beta2, one_minus_b1, one_minus_b2, eps, step_size, bc2_sqrt;
};

// One element: its moments updated in place, its new value returned (torch's addcdiv order:
// (step_size * m) / denom).
KOKKOS_INLINE_FUNCTION float adamw_element(float p, float g, float& m, float& v, const AdamWConstants& c,
                                           float decay) {
  m = m * c.beta1 + c.one_minus_b1 * g;
  v = v * c.beta2 + c.one_minus_b2 * g * g;
  const float denom = kmath::sqrt(v) / c.bc2_sqrt + c.eps;
  return p * decay - c.step_size * m / denom;
}

// Host execution spaces only: the segment table is read from host memory.
template <class ES>
void adamw_update(const ES& space, Vec<ES> param, CVec<ES> grad, Vec<ES> m, Vec<ES> v,
                  const std::vector<AdamWSegment>& segments, const AdamWStep& h, uint16_t* working) {
  const double bc1 = 1.0 - kmath::pow(double(h.beta1), double(h.step));
  const double bc2 = 1.0 - kmath::pow(double(h.beta2), double(h.step));
  const AdamWConstants c{h.beta1, h.beta2, float(1.0 - double(h.beta1)), float(1.0 - double(h.beta2)), h.eps,
                         float(double(h.lr) / bc1), float(kmath::sqrt(bc2))};
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
  uint16_t* w_ = working;
  parallel_chunks("trident::adamw_update", space, n, KOKKOS_LAMBDA(int64_t begin, int64_t end) {
    int64_t s = int64_t(std::upper_bound(starts_, starts_ + last_segment + 1, begin) - starts_) - 1;
    while (begin < end) {
      const int64_t stop = std::min(end, starts_[s + 1]);
      const float decay = decays_[s];
      float* KOKKOS_RESTRICT p = p_;
      const float* KOKKOS_RESTRICT g = g_;
      float* KOKKOS_RESTRICT mm = m_;
      float* KOKKOS_RESTRICT vv = v_;
      uint16_t* KOKKOS_RESTRICT w = w_;
      if (w) {  // two loops rather than a test per element, so that each stays one vectorised pass
        for (int64_t i = begin; i < stop; ++i) {
          p[i] = adamw_element(p[i], g[i], mm[i], vv[i], c, decay);
          const float r = round_mantissa(p[i], 16);
          uint32_t u;
          memcpy(&u, &r, sizeof u);
          w[i] = uint16_t(u >> 16);
        }
      } else {
        for (int64_t i = begin; i < stop; ++i) p[i] = adamw_element(p[i], g[i], mm[i], vv[i], c, decay);
      }
      begin = stop;
      ++s;
    }
  });
}

}  // namespace trident::kk
