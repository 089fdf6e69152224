#include "train/flops.hpp"

namespace trident {

double model_flops_per_token(const GptShapes& s, int64_t parameter_count) {
  return 6.0 * double(parameter_count) + 12.0 * double(s.L) * double(s.C) * double(s.T);
}

}  // namespace trident
