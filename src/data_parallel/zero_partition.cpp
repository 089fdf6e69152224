#include "data_parallel/zero_partition.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace trident {

std::vector<int64_t> partition_flat(int64_t total, int parts, int64_t align) {
  TRIDENT_CHECK(total >= 0 && parts >= 1 && align >= 1, "partition_flat({}, {}, {})", total, parts, align);
  // Split whole alignment units as evenly as integers allow: sizes differ by at most one unit.
  const int64_t units = (total + align - 1) / align;
  std::vector<int64_t> bounds(size_t(parts) + 1);
  for (int r = 0; r <= parts; ++r) bounds[size_t(r)] = std::min(total, units * r / parts * align);
  return bounds;
}

}  // namespace trident
