#include "model/fp32_tensors.hpp"

#include <algorithm>

namespace trident {

Fp32Tensors::Fp32Tensors(const ParameterLayout& layout) {
  std::vector<const ParamTensor*> kept;
  for (const auto& t : layout.tensors())
    if (t.kept_in_fp32() && t.numel > 0) kept.push_back(&t);
  std::sort(kept.begin(), kept.end(), [](const ParamTensor* a, const ParamTensor* b) { return a->offset < b->offset; });
  for (const ParamTensor* t : kept) {
    if (!runs_.empty() && runs_.back().end == t->offset) {
      runs_.back().end += t->numel;
      continue;
    }
    runs_.push_back({t->offset, t->offset + t->numel, size()});
  }
}

int64_t Fp32Tensors::packed_offset(int64_t flat) const {
  // The last run starting at or before flat.
  const auto it = std::upper_bound(runs_.begin(), runs_.end(), flat, [](int64_t f, const Run& r) { return f < r.begin; });
  if (it == runs_.begin()) return 0;
  const Run& r = *std::prev(it);
  return r.packed + (std::min(flat, r.end) - r.begin);
}

}  // namespace trident
