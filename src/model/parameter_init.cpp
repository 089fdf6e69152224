// Counter-based initialisation of any slice of the model: element i of the whole tensor `name` is
// f(seed, name, i), so a rank generates its TP slice of its pipeline chunks (or any element range
// of them) without the rest of the model.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.hpp"
#include "core/splitmix64.hpp"
#include "model/parameters.hpp"

namespace trident {
namespace {

// The per-tensor key of the counter-based generator, computed once per tensor (not per element).
uint64_t init_key(uint64_t seed, const std::string& name) { return splitmix64(seed ^ fnv1a(name)); }

float normal_at(uint64_t key, int64_t index) {
  const double u1 = ((splitmix64(key + 2 * uint64_t(index)) >> 11) + 1) * 0x1.0p-53;  // (0, 1]
  const double u2 = (splitmix64(key + 2 * uint64_t(index) + 1) >> 11) * 0x1.0p-53;   // [0, 1)
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

}  // namespace

float init_normal(uint64_t seed, const std::string& name, int64_t index) {
  return normal_at(init_key(seed, name), index);
}

void init_tensor_elements(const ParamTensor& t, const GptShapes& s, int tp_rank, double std, uint64_t seed,
                          int64_t begin, int64_t end, float* out) {
  TRIDENT_CHECK(0 <= begin && begin <= end && end <= t.numel, "{}: element range [{}, {}) outside [0, {})", t.name,
                begin, end, t.numel);
  const int64_t n = end - begin;
  switch (t.kind) {
    case ParamKind::NormWeight:
      for (int64_t i = 0; i < n; ++i) out[i] = 1.0f;
      return;
    case ParamKind::Bias:
    case ParamKind::NormBias:
      std::memset(out, 0, sizeof(float) * size_t(n));
      return;
    case ParamKind::Weight:
    case ParamKind::Embedding:
    case ParamKind::PositionEmbedding:
      break;
  }
  const double sd = t.residual_projection ? std / std::sqrt(2.0 * s.L) : std;
  const uint64_t key = init_key(seed, t.name);
  const int64_t cols = t.shape.size() > 1 ? t.shape[1] : 1;
  // Vocabulary padding rows (>= V) of the embedding and the LM head stay zero.
  const bool padded = t.kind == ParamKind::Embedding && t.global_shape[0] == s.Vp;
  const int64_t real_end = padded ? s.V * cols : INT64_MAX;
  // Element l of this rank's slice is element g of the whole tensor ([out, in] storage, vocabulary
  // padded to Vp): its value does not depend on the TP layout.
  for_each_slice_run(t, tp_rank, [&](int64_t g, int64_t l, int64_t n) {
    for (int64_t k = std::max(l, begin); k < std::min(l + n, end); ++k) {
      const int64_t index = g + (k - l);
      out[k - begin] = index < real_end ? static_cast<float>(sd * normal_at(key, index)) : 0.0f;
    }
  });
}

void init_parameter_range(const ParameterLayout& layout, double std, uint64_t seed, int64_t begin, int64_t end,
                          float* out) {
  TRIDENT_CHECK(0 <= begin && begin <= end && end <= layout.total(), "element range [{}, {}) outside the layout's {}",
                begin, end, layout.total());
  for (const auto& t : layout.tensors()) {
    const int64_t first = std::max(begin, t.offset), last = std::min(end, t.offset + t.numel);
    if (first < last)
      init_tensor_elements(t, layout.shapes(), layout.tp_rank(), std, seed, first - t.offset, last - t.offset,
                           out + (first - begin));
  }
}

void init_parameters(const ParameterLayout& layout, double std, uint64_t seed, float* host) {
  init_parameter_range(layout, std, seed, 0, layout.total(), host);
}

}  // namespace trident
