#pragma once
// The training loop on one rank: batches from the data pipeline, forward/backward per micro-batch
// with gradient accumulation, global-norm clipping, AdamW with the LR schedule, validation,
// and the per-step log line and metrics.
#include <memory>
#include <vector>

#include "comm/mesh.hpp"
#include "data/dataset.hpp"
#include "deck/config.hpp"
#include "kernels.hpp"
#include "model/gpt.hpp"
#include "optim/adamw.hpp"
#include "train/metrics.hpp"

namespace trident {

class Trainer {
 public:
  // Builds the model (init_from or seeded init; this rank's shard of it), optimizer and data
  // streams. `mesh` may be null for a serial run. Throws trident::Error for what the deck asks and
  // this build cannot do.
  Trainer(const Config& cfg, Kernels& kernels, ParallelMesh* mesh = nullptr);

  // Runs steps 1..train.steps, logging and writing metrics; returns every step's figures.
  std::vector<StepMetrics> run();

  // One optimizer step (1-based): the loss is that of the step's batch before its update.
  StepMetrics train_step(int64_t step);
  // Mean loss over data.val_steps validation batches.
  double validation_loss();

  GptModel& model() { return *model_; }
  AdamW& optimizer() { return *optimizer_; }

 private:
  void fill_micro_batch(const BatchSampler& sampler, int64_t step0, int64_t first_sample);

  Config cfg_;
  Kernels& k_;
  ParallelMesh* mesh_;
  GptShapes shapes_;
  std::unique_ptr<GptModel> model_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<TokenStream> train_stream_, val_stream_;
  std::unique_ptr<BatchSampler> train_sampler_, val_sampler_;
  std::vector<int32_t> inputs_, targets_;
  double flops_per_token_ = 0;
  double peak_tflops_ = 0;
};

}  // namespace trident
