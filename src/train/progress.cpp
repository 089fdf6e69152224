#include "train/progress.hpp"

#include "optim/lr_schedule.hpp"

namespace trident {

TrainingProgress progress_after_step(const Config& cfg, int64_t step, double loss) {
  TrainingProgress p;
  p.step = step;
  p.optimizer_step = step;
  p.data_step = step;
  p.consumed_samples = step * cfg.train.global_batch;
  p.model_seed = cfg.model.seed;
  p.data_seed = cfg.data.seed;
  p.lr = step > 0 ? learning_rate(cfg.train, step) : 0.0;
  p.loss = loss;
  return p;
}

}  // namespace trident
