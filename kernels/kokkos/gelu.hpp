#pragma once
// The MLP activations, forward and backward side by side; backward accumulates into dinp.
// GELU, tanh approximation: gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
// SwiGLU (Llama): inp [N, 2F] = gate | up per row, out [N, F] = silu(gate) * up, silu(g) = g sigmoid(g).
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

// SwiGLU. sigmoid(g) = 1 / (1 + exp(-g)): exp overflows to inf for g < -88, sigmoid is then 0 and
// silu -0, no NaN.
template <class ES>
void swiglu_forward(const ES& space, Mat<ES> out, CMat<ES> inp) {
  const int64_t F = out.extent(1);
  parallel_rows("trident::swiglu_forward", space, out.extent(0), F, KOKKOS_LAMBDA(int64_t i, int64_t j) {
    const float g = inp(i, j), u = inp(i, F + j);
    out(i, j) = g / (1.0f + kmath::exp(-g)) * u;
  });
}

// d/dup = silu(g);  d/dgate = up * silu'(g),  silu'(g) = s + silu(g) (1 - s) with s = sigmoid(g)
// (= s (1 + g (1 - s)); written with silu so that g -> -inf gives 0 + (-0) (1) without inf * 0).
template <class ES>
void swiglu_backward(const ES& space, Mat<ES> dinp, CMat<ES> inp, CMat<ES> dout) {
  const int64_t F = dout.extent(1);
  parallel_rows("trident::swiglu_backward", space, dout.extent(0), F, KOKKOS_LAMBDA(int64_t i, int64_t j) {
    const float g = inp(i, j), u = inp(i, F + j), dy = dout(i, j);
    const float s = 1.0f / (1.0f + kmath::exp(-g));
    const float silu = g * s;
    dinp(i, j) += dy * u * (s + silu * (1.0f - s));
    dinp(i, F + j) += dy * silu;
  });
}

}  // namespace trident::kk
