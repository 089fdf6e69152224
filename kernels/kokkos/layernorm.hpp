#pragma once
// LayerNorm over the last axis (eps from the caller, GPT-2's 1e-5) with weight and bias, and RMSNorm
// (Llama: no centring, no bias), forward and backward side by side.
// Row statistics are computed in double (LayerNorm: two passes, mean then the centred variance, so a
// large common offset does not cancel catastrophically; RMSNorm: the mean of squares); mean and rstd
// are saved as float for backward. eps enters the double statistics as double(eps).
#include <type_traits>

#include "kokkos/common.hpp"

namespace trident::kk {

// One row per work item. With a writable `inp` (Mat) the residual add is fused in: inp += residual
// in the pass that sums the row, so the sum is written back and normalised without another pass over
// it (the residual stream's x + attn then ln_2); with a CMat, inp is only read and residual unused.
template <class ES, class InpView>
void layernorm_forward(const ES& space, Mat<ES> out, Vec<ES> mean, Vec<ES> rstd, InpView inp, CMat<ES> residual,
                       CVec<ES> weight, CVec<ES> bias, float eps) {
  constexpr bool kAddResidual = !std::is_const<typename InpView::value_type>::value;
  const int64_t N = inp.extent(0), C = inp.extent(1);
  const double eps_d = eps;
  Kokkos::parallel_for(
      "trident::layernorm_forward", Range<ES>(space, 0, N), KOKKOS_LAMBDA(int64_t i) {
        double m = 0.0;
        for (int64_t c = 0; c < C; ++c) {
          if constexpr (kAddResidual) inp(i, c) += residual(i, c);
          m += inp(i, c);
        }
        m /= double(C);
        double var = 0.0;
        for (int64_t c = 0; c < C; ++c) {
          const double d = double(inp(i, c)) - m;
          var += d * d;
        }
        var /= double(C);
        const double rs = 1.0 / kmath::sqrt(var + eps_d);
        for (int64_t c = 0; c < C; ++c) {
          const float n = float((double(inp(i, c)) - m) * rs);
          out(i, c) = n * weight(c) + bias(c);
        }
        mean(i) = float(m);
        rstd(i) = float(rs);
      });
}

// dinp += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = weight * dout;
// dweight += sum_rows norm * dout; dbias += sum_rows dout (rows in order, double accumulators).
template <class ES>
void layernorm_backward(const ES& space, Mat<ES> dinp, Vec<ES> dweight, Vec<ES> dbias, CMat<ES> dout,
                        CMat<ES> inp, CVec<ES> weight, CVec<ES> mean, CVec<ES> rstd) {
  const int64_t N = inp.extent(0), C = inp.extent(1);
  Kokkos::parallel_for(
      "trident::layernorm_backward_input", Range<ES>(space, 0, N), KOKKOS_LAMBDA(int64_t i) {
        const double m = mean(i), rs = rstd(i);
        double dnorm_mean = 0.0, dnorm_norm_mean = 0.0;
        for (int64_t c = 0; c < C; ++c) {
          const double n = (double(inp(i, c)) - m) * rs;
          const double dn = double(weight(c)) * double(dout(i, c));
          dnorm_mean += dn;
          dnorm_norm_mean += dn * n;
        }
        dnorm_mean /= double(C);
        dnorm_norm_mean /= double(C);
        for (int64_t c = 0; c < C; ++c) {
          const double n = (double(inp(i, c)) - m) * rs;
          const double dn = double(weight(c)) * double(dout(i, c));
          dinp(i, c) += float(rs * (dn - dnorm_mean - n * dnorm_norm_mean));
        }
      });
  Kokkos::parallel_for(
      "trident::layernorm_backward_params", Range<ES>(space, 0, C), KOKKOS_LAMBDA(int64_t c) {
        double dw = 0.0, db = 0.0;
        for (int64_t i = 0; i < N; ++i) {
          const double n = (double(inp(i, c)) - double(mean(i))) * double(rstd(i));
          dw += n * double(dout(i, c));
          db += double(dout(i, c));
        }
        dweight(c) += float(dw);
        dbias(c) += float(db);
      });
}

// RMSNorm, one row per work item: rstd = 1 / sqrt(mean(inp^2) + eps) in double;
// out = float(inp * rstd) * weight (the normalised value rounded once, as LayerNorm does).
// The residual add fused in as layernorm_forward's (a writable `inp`).
template <class ES, class InpView>
void rmsnorm_forward(const ES& space, Mat<ES> out, Vec<ES> rstd, InpView inp, CMat<ES> residual, CVec<ES> weight,
                     float eps) {
  constexpr bool kAddResidual = !std::is_const<typename InpView::value_type>::value;
  const int64_t N = inp.extent(0), C = inp.extent(1);
  const double eps_d = eps;
  Kokkos::parallel_for(
      "trident::rmsnorm_forward", Range<ES>(space, 0, N), KOKKOS_LAMBDA(int64_t i) {
        double ss = 0.0;
        for (int64_t c = 0; c < C; ++c) {
          if constexpr (kAddResidual) inp(i, c) += residual(i, c);
          ss += double(inp(i, c)) * double(inp(i, c));
        }
        const double rs = 1.0 / kmath::sqrt(ss / double(C) + eps_d);
        for (int64_t c = 0; c < C; ++c) out(i, c) = float(double(inp(i, c)) * rs) * weight(c);
        rstd(i) = float(rs);
      });
}

// With norm = inp * rstd and dnorm = weight * dout (d rstd / d inp = -rstd^3 inp / C):
// dinp += rstd * (dnorm - norm * mean(dnorm * norm)); dweight += sum_rows norm * dout (rows in order,
// double accumulators).
template <class ES>
void rmsnorm_backward(const ES& space, Mat<ES> dinp, Vec<ES> dweight, CMat<ES> dout, CMat<ES> inp, CVec<ES> weight,
                      CVec<ES> rstd) {
  const int64_t N = inp.extent(0), C = inp.extent(1);
  Kokkos::parallel_for(
      "trident::rmsnorm_backward_input", Range<ES>(space, 0, N), KOKKOS_LAMBDA(int64_t i) {
        const double rs = rstd(i);
        double dnorm_norm_mean = 0.0;
        for (int64_t c = 0; c < C; ++c)
          dnorm_norm_mean += double(weight(c)) * double(dout(i, c)) * (double(inp(i, c)) * rs);
        dnorm_norm_mean /= double(C);
        for (int64_t c = 0; c < C; ++c) {
          const double n = double(inp(i, c)) * rs;
          const double dn = double(weight(c)) * double(dout(i, c));
          dinp(i, c) += float(rs * (dn - n * dnorm_norm_mean));
        }
      });
  Kokkos::parallel_for(
      "trident::rmsnorm_backward_weight", Range<ES>(space, 0, C), KOKKOS_LAMBDA(int64_t c) {
        double dw = 0.0;
        for (int64_t i = 0; i < N; ++i) dw += double(inp(i, c)) * double(rstd(i)) * double(dout(i, c));
        dweight(c) += float(dw);
      });
}

}  // namespace trident::kk
