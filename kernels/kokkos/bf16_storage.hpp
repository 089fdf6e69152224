#pragma once
// bf16 storage of activations (Kernels::round_to_bf16, unpack_bf16): the rounding is the GEMMs'
// (round_mantissa with bf16's 16 dropped bits), so a packed value is exactly what a bf16 GEMM reads.
#include <cstdint>

#include "kokkos/common.hpp"
#include "kokkos/matmul.hpp"

namespace trident::kk {

// x rounded in place to bf16; packed (extent 0: not wanted) receives the top 16 bits of each.
template <class ES>
void round_to_bf16(const ES& space, Vec<ES> x, Vec<ES, uint16_t> packed) {
  const bool keep = packed.extent(0) > 0;
  Kokkos::parallel_for(
      "trident::round_to_bf16", Range<ES>(space, 0, x.extent(0)), KOKKOS_LAMBDA(int64_t i) {
        const float r = round_mantissa(x(i), 16);
        x(i) = r;
        if (keep) {
          uint32_t u;
          memcpy(&u, &r, sizeof u);
          packed(i) = uint16_t(u >> 16);
        }
      });
}

// packed = the patterns of x rounded to bf16; x unchanged.
template <class ES>
void pack_bf16(const ES& space, CVec<ES> x, Vec<ES, uint16_t> packed) {
  Kokkos::parallel_for(
      "trident::pack_bf16", Range<ES>(space, 0, x.extent(0)), KOKKOS_LAMBDA(int64_t i) {
        const float r = round_mantissa(x(i), 16);
        uint32_t u;
        memcpy(&u, &r, sizeof u);
        packed(i) = uint16_t(u >> 16);
      });
}

// The value of a bf16 pattern (its top 16 bits of an fp32).
KOKKOS_INLINE_FUNCTION float bf16_value(uint16_t bits) {
  const uint32_t u = uint32_t(bits) << 16;
  float v;
  memcpy(&v, &u, sizeof v);
  return v;
}

// out = the values of the bf16 patterns in packed.
template <class ES>
void unpack_bf16(const ES& space, Vec<ES> out, CVec<ES, uint16_t> packed) {
  Kokkos::parallel_for(
      "trident::unpack_bf16", Range<ES>(space, 0, out.extent(0)),
      KOKKOS_LAMBDA(int64_t i) { out(i) = bf16_value(packed(i)); });
}

}  // namespace trident::kk
