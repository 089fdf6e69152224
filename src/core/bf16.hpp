#pragma once
// bfloat16 bit patterns on the host (files: safetensors BF16 tensors). The same rounding as the
// backends' (kernels/kokkos/matmul.hpp round_mantissa, kernels/cuda/bf16.cuh): to nearest, ties to
// even; a finite value past bf16's largest becomes Inf; NaN stays a quiet NaN.
#include <cstdint>
#include <cstring>

namespace trident {

inline uint16_t bf16_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u | 0x00400000u) >> 16);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

inline float bf16_value(uint16_t bits) {
  const uint32_t u = uint32_t(bits) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// A bf16 element in a communication buffer (mesh.grad_reduce_dtype = "bf16"): its sum (comm/group.hpp)
// adds two elements in fp32 and rounds the result to bf16, as NCCL's bf16 reductions do.
struct Bf16 {
  uint16_t bits;
};

}  // namespace trident
