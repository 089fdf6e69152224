#include "train/preflight.hpp"

#include <fmt/format.h>

#include "backend.hpp"
#include "core/error.hpp"
#include "train/metrics.hpp"
#include "train/training_data.hpp"

namespace trident {

void check_supported(const Config& cfg) {
  if (cfg.runtime.backend == Backend::Cuda) require_cuda_build();
  if (cfg.train.precision == Precision::BF16) throw NotImplemented("train.precision = \"bf16\" (fp32 only so far)");
}

void check_output_paths(const Config& cfg) {
  if (!cfg.runtime.metrics.empty()) check_output_path("[runtime] metrics", cfg.runtime.metrics);
  if (!cfg.runtime.trace.empty()) check_output_path("[runtime] trace", cfg.runtime.trace);
}

void check_trainable(const Config& cfg) {
  check_supported(cfg);
  check_output_paths(cfg);
  open_training_data(cfg);
}

}  // namespace trident
