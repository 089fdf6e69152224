#pragma once
// The checksum of a checkpoint dataset: a position-dependent additive hash, so that any set of
// ranks holding disjoint parts of a dataset can compute it without reading anything back, and any
// other layout (or a serial tool, or numpy) can recompute it from the file:
//
//   checksum = sum over i of mix((i * K) xor bits(x_i))   mod 2^64
//   mix(z)   = splitmix64 finaliser: z += K; z = (z ^ z>>30) * 0xbf58476d1ce4e5b9;
//              z = (z ^ z>>27) * 0x94d049bb133111eb; z ^ z>>31
//   K = 0x9e3779b97f4a7c15, i = row-major index of the element in the stored (global) dataset,
//   bits = the element's IEEE float32 bit pattern (the byte value for the deck text).
//
// For a fixed position, mix is a bijection of the bits, so a change of any single element (a
// flipped bit) always changes the checksum; several changes cancel with probability ~2^-64.
#include <cstdint>

namespace trident::ckpt {

inline constexpr uint64_t kChecksumK = 0x9e3779b97f4a7c15ULL;
inline constexpr const char* kChecksumAlgorithm =
    "sum64-splitmix: sum over row-major index i of mix((i*0x9e3779b97f4a7c15) ^ bits(x_i)) mod 2^64, "
    "mix = splitmix64 finaliser";

inline uint64_t checksum_mix(uint64_t z) {
  z += kChecksumK;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

inline uint64_t element_hash(uint64_t index, uint32_t bits) { return checksum_mix((index * kChecksumK) ^ bits); }

// Checksum contribution of n consecutive float32 bit patterns starting at dataset index `first`.
inline uint64_t checksum_run(const uint32_t* bits, int64_t n, uint64_t first) {
  uint64_t s = 0;
  for (int64_t k = 0; k < n; ++k) s += element_hash(first + uint64_t(k), bits[k]);
  return s;
}

}  // namespace trident::ckpt
