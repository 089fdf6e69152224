#include "train/preflight.hpp"

#include <fmt/format.h>

#include <filesystem>

#include "backend.hpp"
#include "checkpoint/checkpoint.hpp"
#include "core/error.hpp"
#include "model/hf_config.hpp"
#include "safetensors/safetensors_set.hpp"
#include "train/metrics.hpp"
#include "train/training_data.hpp"

namespace trident {

void check_supported(const Config& cfg) {
  if (cfg.runtime.backend == Backend::Cuda) require_cuda_build();
}

void check_output_paths(const Config& cfg) {
  if (!cfg.runtime.metrics.empty()) check_output_path("[runtime] metrics", cfg.runtime.metrics);
  if (!cfg.runtime.trace.empty()) check_output_path("[runtime] trace", cfg.runtime.trace);
  if (!cfg.runtime.op_profile.empty()) check_output_path("[runtime] op_profile", cfg.runtime.op_profile);
}

void check_checkpoint_and_model_paths(const Config& cfg) {
  if (!cfg.model.init_from.empty()) {
    try {
      const SafetensorsSet weights(cfg.model.init_from);
      check_hf_config(cfg.model, cfg.model.init_from);
    } catch (const Error& e) {
      throw Error(fmt::format("[model] init_from = \"{}\": {}", cfg.model.init_from, e.what()));
    }
  }
  const auto& c = cfg.checkpoint;
  if (!c.dir.empty()) check_checkpoint_dir(c.dir);
  if (c.resume == "auto" || c.resume == "required" || c.resume == "never") return;
  std::error_code ec;
  if (std::filesystem::is_directory(c.resume, ec)) return;  // its checkpoints are chosen at start-up
  try {
    read_checkpoint_header(c.resume);
  } catch (const Error& e) {
    throw Error(fmt::format("[checkpoint] resume = \"{}\": {}", c.resume, e.what()));
  }
}

void check_trainable(const Config& cfg) {
  check_supported(cfg);
  check_output_paths(cfg);
  check_checkpoint_and_model_paths(cfg);
  open_training_data(cfg);
}

}  // namespace trident
