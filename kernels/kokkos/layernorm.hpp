#pragma once
// LayerNorm over the last axis (eps 1e-5) with weight and bias, forward and backward side by side.
// Row statistics are computed in double (two passes: mean, then the centred variance, so a large
// common offset does not cancel catastrophically); mean and rstd are saved as float for backward.
#include "kokkos/common.hpp"

namespace trident::kk {

constexpr double kLayerNormEps = 1e-5;

// One row per work item.
template <class ES>
void layernorm_forward(const ES& space, Mat<ES> out, Vec<ES> mean, Vec<ES> rstd, CMat<ES> inp,
                       CVec<ES> weight, CVec<ES> bias) {
  const int64_t N = inp.extent(0), C = inp.extent(1);
  Kokkos::parallel_for(
      "trident::layernorm_forward", Range<ES>(space, 0, N), KOKKOS_LAMBDA(int64_t i) {
        double m = 0.0;
        for (int64_t c = 0; c < C; ++c) m += inp(i, c);
        m /= double(C);
        double var = 0.0;
        for (int64_t c = 0; c < C; ++c) {
          const double d = double(inp(i, c)) - m;
          var += d * d;
        }
        var /= double(C);
        const double rs = 1.0 / kmath::sqrt(var + kLayerNormEps);
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

}  // namespace trident::kk
