// Counter-based initialisation of any slice of the model: element i of the whole tensor `name` is
// f(seed, name, i), so a rank generates its TP slice of its pipeline chunks (or any element range
// of them) without the rest of the model.
#include <cmath>
#include <cstring>

#include "core/error.hpp"
#include "core/splitmix64.hpp"
#include "model/parameters.hpp"

namespace trident {
namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// The per-tensor key of the counter-based generator, computed once per tensor (not per element).
uint64_t init_key(uint64_t seed, const std::string& name) { return splitmix64(seed ^ fnv1a(name)); }

float normal_at(uint64_t key, int64_t index) {
  const double u1 = ((splitmix64(key + 2 * uint64_t(index)) >> 11) + 1) * 0x1.0p-53;  // (0, 1]
  const double u2 = (splitmix64(key + 2 * uint64_t(index) + 1) >> 11) * 0x1.0p-53;   // [0, 1)
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

// Index in the whole tensor ([out, in] storage, vocabulary padded to Vp) of element (row, 0) of TP
// rank tp_rank's slice: the elements of one local row are consecutive in the whole tensor too.
int64_t global_row_start(const ParamTensor& t, int tp_rank, int64_t row) {
  const int64_t rows = t.shape[0];
  const int64_t cols = t.shape.size() > 1 ? t.shape[1] : 1;
  const int64_t global_cols = t.global_shape.size() > 1 ? t.global_shape[1] : 1;
  switch (t.split) {
    case TpSplit::None:
      return row * cols;
    case TpSplit::Rows:
      return (tp_rank * rows + row) * cols;
    case TpSplit::Cols:
      return row * global_cols + tp_rank * cols;
    case TpSplit::QkvRows: {
      const int64_t block = rows / 3, global_block = t.global_shape[0] / 3;  // rows of q (or k, v)
      const int64_t b = row / block;
      return (b * global_block + tp_rank * block + (row - b * block)) * cols;
    }
  }
  TRIDENT_FAIL("{}: unknown TP split", t.name);
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
      break;
  }
  const double sd = t.residual_projection ? std / std::sqrt(2.0 * s.L) : std;
  const uint64_t key = init_key(seed, t.name);
  const int64_t cols = t.shape.size() > 1 ? t.shape[1] : 1;
  // Vocabulary padding rows (>= V) of the embedding and the LM head stay zero.
  const bool padded = t.kind == ParamKind::Embedding && t.global_shape[0] == s.Vp;
  const int64_t real_end = padded ? s.V * cols : INT64_MAX;
  for (int64_t k = begin; k < end;) {
    const int64_t row = k / cols, stop = std::min(end, (row + 1) * cols);
    const int64_t g0 = global_row_start(t, tp_rank, row) + (k - row * cols);
    float* o = out + (k - begin);
    for (int64_t i = 0; i < stop - k; ++i)
      o[i] = g0 + i < real_end ? static_cast<float>(sd * normal_at(key, g0 + i)) : 0.0f;
    k = stop;
  }
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
