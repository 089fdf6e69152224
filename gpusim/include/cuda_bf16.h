#pragma once
// gpu-sim's cuda_bf16.h: the bfloat16 type and the conversions trident's kernels use, as the CUDA
// toolkit's header of the same name declares them (the bits are kept in a protected member there too,
// so code that compiles here compiles with nvcc). bfloat16 is the top 16 bits of an IEEE fp32 pattern:
// 8 exponent bits, 8 significant bits (7 stored).
#include <cstdint>
#include <cstring>

#include "gpusim/driver_types.h"

struct __align__(2) __nv_bfloat16 {
  __nv_bfloat16() = default;

 protected:
  unsigned short __x;

  friend __nv_bfloat16 __float2bfloat16_rn(float);
  friend float __bfloat162float(__nv_bfloat16);
};

// To nearest, ties to even; NaN stays a (quiet) NaN, a finite value past bfloat16's largest becomes Inf.
inline __nv_bfloat16 __float2bfloat16_rn(float a) {
  uint32_t u;
  std::memcpy(&u, &a, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    u |= 0x00400000u;
  else
    u += 0x7fffu + ((u >> 16) & 1u);
  __nv_bfloat16 r;
  r.__x = static_cast<unsigned short>(u >> 16);
  return r;
}
inline __nv_bfloat16 __float2bfloat16(float a) { return __float2bfloat16_rn(a); }

// Exact: the bits become the top half of an fp32 pattern.
inline float __bfloat162float(__nv_bfloat16 a) {
  const uint32_t u = uint32_t(a.__x) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
