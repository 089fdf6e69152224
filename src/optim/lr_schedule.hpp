#pragma once
// Learning rate of step s (counted from 1): linear warm-up from lr/warmup to lr over warmup_steps,
// then constant, or cosine / linear decay from lr to min_lr, reaching min_lr at the last step.
#include <cstdint>

#include "core/config.hpp"

namespace trident {

double learning_rate(const TrainConfig& t, int64_t step);

}  // namespace trident
