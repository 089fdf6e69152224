#pragma once
// SplitMix64 (Steele, Lea and Flood 2014): a 64-bit mixing function, the one source of counter-based
// randomness in trident (parameter init: value = f(seed, name, index); data order: epoch keys).
// Changing it changes every initialisation and every shuffled data order.
#include <cstdint>

namespace trident {

constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace trident
