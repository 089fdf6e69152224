#pragma once
// SplitMix64 (Steele, Lea and Flood 2014): a 64-bit mixing function, the one source of counter-based
// randomness in trident (parameter init: value = f(seed, name, index); data order: epoch keys).
// Changing it changes every initialisation and every shuffled data order.
#include <cstdint>
#include <string>

namespace trident {

constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// FNV-1a of a string: a stable 64-bit key for a name (std::hash may differ between builds): tensor names
// in the parameter init, the CPU peak cache's file name.
inline uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

}  // namespace trident
