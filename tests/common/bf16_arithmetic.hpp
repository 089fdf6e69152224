#pragma once
// bf16 rounding computed without bit tricks, the tests' independent check of trident's (core/bf16.hpp,
// the backends' round_mantissa): x to 8 significant bits, ties to even (nearbyint in the default
// rounding mode), on bf16's grid (fp32's exponent range, so subnormals keep a fixed step of 2^-133);
// past bf16's largest finite value, infinity.
#include <algorithm>
#include <cmath>
#include <limits>

namespace trident::test {

inline float bf16_by_arithmetic(float x) {
  if (std::isnan(x) || std::isinf(x) || x == 0.0f) return x;
  int e = 0;
  std::frexp(double(x), &e);
  const int step = std::max(e - 8, -133);
  const double v = std::ldexp(std::nearbyint(std::ldexp(double(x), -step)), step);
  if (std::fabs(v) > double(std::numeric_limits<float>::max())) return std::copysign(INFINITY, x);
  return float(v);
}

}  // namespace trident::test
