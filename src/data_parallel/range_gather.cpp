#include "data_parallel/range_gather.hpp"

#include <algorithm>

namespace trident {

void gather_ranges_to_host(Group& dp, Kernels& kernels, const float* mine, const std::vector<int64_t>& bounds,
                           float* host) {
  const int64_t total = bounds.back();
  const auto r0 = size_t(dp.rank());
  float* whole = kernels.alloc(std::max<int64_t>(total, 1));
  if (bounds[r0 + 1] > bounds[r0]) kernels.copy(whole + bounds[r0], mine, bounds[r0 + 1] - bounds[r0]);
  std::vector<Request> pending;
  for (int r = 0; r < dp.size(); ++r)
    if (bounds[size_t(r) + 1] > bounds[size_t(r)])
      pending.push_back(dp.ibroadcast(whole + bounds[size_t(r)], bounds[size_t(r) + 1] - bounds[size_t(r)], r));
  dp.wait_all(pending);
  kernels.copy_to_host(host, whole, total);
  kernels.free(whole);
}

}  // namespace trident
