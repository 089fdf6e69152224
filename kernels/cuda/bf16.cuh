#pragma once
// fp32 <-> bf16 bit patterns, shared by the bf16 GEMM operands (matmul.cu) and bf16 storage
// (bf16_storage.cu), so that both round alike (and as the Kokkos backend's round_mantissa).
#include <cuda_runtime.h>

#include <cstdint>

namespace trident::cuda {

// The top 16 bits of x's pattern rounded to nearest, ties to even (bfloat16); NaN stays a quiet NaN,
// a finite value past bf16's largest rounds to Inf, as __float2bfloat16_rn.
__device__ inline uint16_t bf16_bits(float x) {
  uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u | 0x00400000u) >> 16);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

__device__ inline float bf16_value(uint16_t bits) { return __uint_as_float(uint32_t(bits) << 16); }

// Where a norm's or an activation's output element i goes (Kernels::*_rounded): as computed, or with
// `round` rounded as round_to_bf16 rounds it, its pattern into packed[i] when packed is set.
struct OutputRounding {
  bool round = false;
  uint16_t* packed = nullptr;
  __device__ float operator()(float y, int64_t i) const {
    if (!round) return y;
    const uint16_t bits = bf16_bits(y);
    if (packed) packed[i] = bits;
    return bf16_value(bits);
  }
};

}  // namespace trident::cuda
