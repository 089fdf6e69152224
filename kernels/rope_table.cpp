// rope_table(): RoPE's (cos, sin) table, shared by every backend (computed on the host, copied to the
// backend's memory by the caller). The angle p * theta^(-2i/HD) and its cosine and sine are computed
// in double and rounded to float once, so a long context's large angles keep their precision.
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/error.hpp"
#include "kernels.hpp"

namespace trident {

std::vector<float> rope_table(double theta, int64_t HD, int64_t positions) {
  TRIDENT_CHECK(HD >= 2 && HD % 2 == 0, "rope_table: head size {} is odd (RoPE rotates pairs of dimensions)", HD);
  TRIDENT_CHECK(theta > 0.0 && std::isfinite(theta), "rope_table: theta {} is not a positive number", theta);
  TRIDENT_CHECK(positions >= 0, "rope_table: {} positions", positions);
  const int64_t half = HD / 2;
  std::vector<double> freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) freq[size_t(i)] = std::pow(theta, -2.0 * double(i) / double(HD));
  std::vector<float> table(static_cast<size_t>(positions * half * 2));
  for (int64_t p = 0; p < positions; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = double(p) * freq[size_t(i)];
      table[size_t((p * half + i) * 2)] = float(std::cos(angle));
      table[size_t((p * half + i) * 2 + 1)] = float(std::sin(angle));
    }
  return table;
}

}  // namespace trident
