#include "optim/lr_schedule.hpp"

#include <algorithm>
#include <cmath>

namespace trident {

double learning_rate(const TrainConfig& t, int64_t step) {
  if (step <= t.warmup_steps) return t.lr * double(step) / double(t.warmup_steps);
  if (t.lr_schedule == LrSchedule::Constant) return t.lr;
  const int64_t decay_steps = t.steps - t.warmup_steps;
  const double progress = decay_steps <= 0 ? 1.0 : std::min(1.0, double(step - t.warmup_steps) / decay_steps);
  if (t.lr_schedule == LrSchedule::Linear) return t.lr - (t.lr - t.min_lr) * progress;
  return t.min_lr + 0.5 * (t.lr - t.min_lr) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace trident
