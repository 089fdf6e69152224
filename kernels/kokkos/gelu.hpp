#pragma once
// GELU, tanh approximation: gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
// Forward and backward side by side; backward accumulates into dinp.
//
// Evaluated through the identity 0.5 (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + exp(-2u)): the same
// function, one expf instead of tanhf (glibc's tanhf goes through expm1f and was 4x slower here),
// and no cancellation in 1 + tanh(u) for negative u.
#include "kokkos/common.hpp"

namespace trident::kk {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCube = 0.044715f;

template <class ES>
void gelu_forward(const ES& space, Vec<ES> out, CVec<ES> inp) {
  Kokkos::parallel_for(
      "trident::gelu_forward", Range<ES>(space, 0, out.extent(0)), KOKKOS_LAMBDA(int64_t i) {
        const float x = inp(i);
        const float u = kGeluScale * (x + kGeluCube * x * x * x);
        out(i) = x / (1.0f + kmath::exp(-2.0f * u));  // x * sigmoid(2u); x / inf = -0 far left
      });
}

// d gelu/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) u'   with u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
//           = s + 2 x s (1 - s) u'                          with s = sigmoid(2u)  (tanh u = 2s - 1),
// and s (1 - s) = e / (1 + e)^2 = e s^2 with e = exp(-2u): no cancellation on either side, no branch.
// -2u is clamped at 80 so that e s^2 never becomes inf * 0; past it s (1 - s) < 1e-34 anyway.
template <class ES>
void gelu_backward(const ES& space, Vec<ES> dinp, CVec<ES> inp, CVec<ES> dout) {
  Kokkos::parallel_for(
      "trident::gelu_backward", Range<ES>(space, 0, dinp.extent(0)), KOKKOS_LAMBDA(int64_t i) {
        const float x = inp(i);
        const float u = kGeluScale * (x + kGeluCube * x * x * x);
        const float a = -2.0f * u;
        const float e = kmath::exp(a < 80.0f ? a : 80.0f);  // clamp: e stays finite (e^80 ~ 5.5e34)
        const float s = 1.0f / (1.0f + e);
        const float du = kGeluScale * (1.0f + 3.0f * kGeluCube * x * x);
        const float local = s + 2.0f * x * (e * s * s) * du;  // s (1 - s) = e / (1 + e)^2
        dinp(i) += local * dout(i);
      });
}

}  // namespace trident::kk
