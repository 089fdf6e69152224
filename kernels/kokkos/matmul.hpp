#pragma once
// Linear layer y = x W^T + b (W is [out, in]), forward and backward side by side.
// Every GEMM goes through KokkosBlas::gemm on LayoutRight views, which KokkosKernels hands to the
// BLAS TPL (OpenBLAS sgemm here, cuBLAS in a CUDA build with that TPL). `gemm` below refuses at
// compile time any operand that would silently fall back to the native (5x slower) kernel.
#include <KokkosBlas3_gemm.hpp>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/matmul_precision.hpp"
#include "kokkos/common.hpp"

namespace trident::kk {

// C = beta*C + alpha*op(A) op(B) through KokkosBlas::gemm. A and B are read-only.
template <class AV, class BV, class CV>
void gemm(const char* transA, const char* transB, float alpha, const AV& A, const BV& B, float beta,
          const CV& C) {
  static_assert(std::is_same<typename AV::array_layout, Kokkos::LayoutRight>::value &&
                    std::is_same<typename BV::array_layout, Kokkos::LayoutRight>::value &&
                    std::is_same<typename CV::array_layout, Kokkos::LayoutRight>::value,
                "trident GEMM operands must be LayoutRight (LayoutStride falls back to a slow kernel)");
  using AN = Kokkos::View<const float**, Kokkos::LayoutRight, typename AV::device_type, Unmanaged>;
  using BN = Kokkos::View<const float**, Kokkos::LayoutRight, typename BV::device_type, Unmanaged>;
  using CN = Kokkos::View<float**, Kokkos::LayoutRight, typename CV::device_type, Unmanaged>;
#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
  if constexpr (std::is_same<typename CV::memory_space, Kokkos::HostSpace>::value) {
    static_assert(KokkosBlas::Impl::gemm_tpl_spec_avail<AN, BN, CN>::value,
                  "KokkosBlas::gemm would not dispatch these views to the BLAS TPL");
  }
#endif
  const AN a = A;
  const BN b = B;
  const CN c = C;
  const bool a_t = transA[0] != 'N' && transA[0] != 'n';
  const int64_t K = a_t ? a.extent(0) : a.extent(1);
  if (c.extent(0) == 0 || c.extent(1) == 0) return;
  if (K == 0) {  // KokkosBlas::gemm returns without touching C here; BLAS semantics say C *= beta
    parallel_rows("trident::gemm_k0", typename CV::execution_space(), c.extent(0), c.extent(1),
                  KOKKOS_LAMBDA(int64_t i, int64_t j) { c(i, j) = beta == 0.0f ? 0.0f : beta * c(i, j); });
    return;
  }
  KokkosBlas::gemm(transA, transB, alpha, a, b, beta, c);
}

// The fp32 bits a GEMM operand loses when rounded to `precision` (core/matmul_precision.hpp):
// bfloat16 keeps the top 16 bits of the pattern, TF32 the top 19.
inline int dropped_mantissa_bits(MatmulPrecision precision) {
  return precision == MatmulPrecision::BF16 ? 16 : precision == MatmulPrecision::TF32 ? 13 : 0;
}

// x rounded to nearest, ties to even, on its top 32 - dropped bits (0 < dropped < 23): as the
// hardware's conversion, a finite value may round up to Inf, Inf stays Inf and NaN stays (quiet) NaN.
KOKKOS_INLINE_FUNCTION float round_mantissa(float x, int dropped) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  const uint32_t low = (uint32_t(1) << dropped) - 1;
  // Half an ulp, less one on a tie to an even value (Inf plus that stays Inf once truncated); a NaN
  // keeps a quiet bit, as its payload may lie in the dropped bits. A select, not a branch, so that
  // loops over it vectorise.
  const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
  const uint32_t rounded = u + (low >> 1) + ((u >> dropped) & 1u);
  u = (nan ? (u | 0x00400000u) : rounded) & ~low;
  memcpy(&x, &u, sizeof u);
  return x;
}

// dst = src with every element rounded as round_mantissa.
template <class ES>
void round_operand(const ES& space, Vec<ES> dst, CVec<ES> src, int dropped) {
  Kokkos::parallel_for(
      "trident::round_operand", Range<ES>(space, 0, src.extent(0)),
      KOKKOS_LAMBDA(int64_t i) { dst(i) = round_mantissa(src(i), dropped); });
}

// dst[N, n] = src[N, o0 : o0 + n] rounded as round_mantissa: a panel of columns made contiguous.
template <class ES>
void round_columns(const ES& space, Mat<ES> dst, CMat<ES> src, int64_t o0, int dropped) {
  parallel_rows("trident::round_columns", space, dst.extent(0), dst.extent(1),
                KOKKOS_LAMBDA(int64_t i, int64_t j) { dst(i, j) = round_mantissa(src(i, o0 + j), dropped); });
}

// dst[N, o0 : o0 + n] = src[N, n]: a panel's product put in its columns.
template <class ES>
void put_columns(const ES& space, Mat<ES> dst, CMat<ES> src, int64_t o0) {
  parallel_rows("trident::put_columns", space, src.extent(0), src.extent(1),
                KOKKOS_LAMBDA(int64_t i, int64_t j) { dst(i, o0 + j) = src(i, j); });
}

// out[N,OC] = inp[N,IC] weight[OC,IC]^T (+ bias[OC] when bias.data() != nullptr).
template <class ES>
void matmul_forward(const ES& space, Mat<ES> out, CMat<ES> inp, CMat<ES> weight, CVec<ES> bias) {
  gemm("N", "T", 1.0f, inp, weight, 0.0f, out);
  if (bias.data() != nullptr) {
    parallel_rows("trident::matmul_bias", space, out.extent(0), out.extent(1),
                  KOKKOS_LAMBDA(int64_t i, int64_t o) { out(i, o) += bias(o); });
  }
}

// dinp += dout weight; dweight += dout^T inp (beta = 1 accumulates); dbias += column sums of dout,
// parallel over columns, rows in order, in double. Each output may be absent (data() == nullptr).
template <class ES>
void matmul_backward(const ES& space, Mat<ES> dinp, Mat<ES> dweight, Vec<ES> dbias, CMat<ES> dout,
                     CMat<ES> inp, CMat<ES> weight) {
  if (dinp.data() != nullptr) gemm("N", "N", 1.0f, dout, weight, 1.0f, dinp);
  if (dweight.data() != nullptr) gemm("T", "N", 1.0f, dout, inp, 1.0f, dweight);
  if (dbias.data() != nullptr) {
    const int64_t N = dout.extent(0);
    Kokkos::parallel_for(
        "trident::matmul_dbias", Range<ES>(space, 0, dout.extent(1)), KOKKOS_LAMBDA(int64_t o) {
          double s = 0.0;
          for (int64_t i = 0; i < N; ++i) s += dout(i, o);
          dbias(o) += float(s);
        });
  }
}

}  // namespace trident::kk
