#pragma once
// The training progress the loop records with a checkpoint after a step.
#include <cstdint>

#include "checkpoint/checkpoint.hpp"
#include "core/config.hpp"

namespace trident {

// The progress after step `step` of a run of `cfg` with this sampler: optimizer_step = data_step =
// step, consumed_samples = step * global_batch, seeds from the deck, lr = learning_rate(step).
TrainingProgress progress_after_step(const Config& cfg, int64_t step, double loss);

}  // namespace trident
