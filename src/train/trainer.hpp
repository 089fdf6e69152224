#pragma once
// The training loop of one rank: its pipeline chunks of the model (one when pp = 1), each a
// tensor-parallel shard; batches from the data pipeline; the pipeline schedule over the step's
// micro-batches with gradient accumulation; tied-embedding and sequence-parallel gradient
// reductions; global-norm clipping across TP and PP; AdamW with the LR schedule; validation; and the
// per-step log line, metrics and (runtime.trace) timeline.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "comm/mesh.hpp"
#include "data/dataset.hpp"
#include "data_parallel/grad_reducer.hpp"
#include "core/config.hpp"
#include "kernels.hpp"
#include "profiled_kernels.hpp"
#include "model/bf16_working_copy.hpp"
#include "model/gpt.hpp"
#include "optim/adamw.hpp"
#include "pipeline/executor.hpp"
#include "train/gradient_finisher.hpp"
#include "train/metrics.hpp"
#include "train/run_summary.hpp"
#include "train/stop_signals.hpp"
#include "train/training_data.hpp"
#include "train/training_samples.hpp"

namespace trident {

class TrainingCheckpoints;
class StopSignals;

// An evaluation's loss summed over the positions it scored (windows x seq_len of them).
struct EvalTotals {
  double loss_sum = 0;
  int64_t windows = 0;
  int64_t positions = 0;
  double mean_loss() const { return loss_sum / double(positions); }
};

class Trainer {
 public:
  // Builds this rank's chunks (init_from or seeded init; its shard of them), optimizers and data
  // streams, then resumes from a checkpoint when checkpoint.resume finds one. `mesh` may be null for
  // a serial run. Throws trident::Error for what the deck asks and this build cannot do.
  // With `use` ModelOnly the data files are not opened (`generate` needs the model alone; train_step
  // and evaluate then refuse).
  enum class Use { Training, ModelOnly };
  Trainer(const Config& cfg, Kernels& kernels, ParallelMesh* mesh = nullptr, Use use = Use::Training);
  ~Trainer();

  // Runs the steps from 1 (or from the one after the resumed checkpoint's) to train.steps, logging,
  // writing metrics and checkpoints; returns every step's figures.
  std::vector<StepMetrics> run();
  // The exit status the run asks for: 0, or after a stop on a signal kExitCheckpointedOnSignal (a
  // checkpoint was written) or 128 + SIGTERM (no checkpoint.dir); see train/stop_signals.hpp.
  int exit_code() const { return exit_code_; }

  // One optimizer step (1-based): the loss is that of the step's batch before its update, the same
  // on every rank.
  StepMetrics train_step(int64_t step);
  // Mean loss over data.val_steps validation batches (the whole validation data for "all").
  double validation_loss();
  // The loss summed over `batches` validation batches, or with batches = kValStepsAll over every whole
  // window of the validation data once (the last batch's padding is not scored); the same on every rank.
  EvalTotals evaluate(int64_t batches);

  // This rank's chunks (local chunk c is global chunk c*pp + stage) and their optimizers (each over
  // this rank's ZeRO range of its chunk: the whole chunk without ZeRO).
  const std::vector<std::unique_ptr<GptModel>>& chunks() const { return chunks_; }
  const std::vector<std::unique_ptr<AdamW>>& optimizers() const { return optimizers_; }
  // Chunk c's reduced gradients of its optimizer's range after a step (element k is flat element
  // optimizers()[c]->begin() + k): with ZeRO-2 the only gradients the rank keeps.
  const float* range_gradients(size_t c) const;
  // Chunk c's parameters of its optimizer's range: what its update writes (the fp32 masters of a bf16
  // working copy; ZeRO-3: the only parameters the rank keeps).
  float* range_parameters(size_t c) const;
  // Chunk c's whole parameters as the model computes with them, in host memory: a bf16 working copy's
  // values, else whole_parameters(c) (samples, tests).
  std::vector<float> working_parameters(size_t c) const;
  // Chunk c's whole parameters in host memory as a checkpoint saves them: under a bf16 working copy
  // the fp32 masters (gathered over DP with ZeRO 1-3, and without a working copy with ZeRO-3:
  // collective).
  std::vector<float> whole_parameters(size_t c) const;
  // The bf16 working copy (train.bf16_parameters below ZeRO-3; else null): the model's parameters then.
  Bf16WorkingCopy* working_copy() { return working_copy_.get(); }
  // The single chunk of a rank without virtual stages.
  GptModel& model() { return *chunks_.at(0); }
  AdamW& optimizer() { return *optimizers_.at(0); }
  PipelineExecutor& pipeline() { return *executor_; }
  const GradientFinisher& gradient_finisher() const { return *finisher_; }
  // Memory of this rank by kind; activations and comm buffers as allocated so far.
  MemoryAccount memory_account() const;

 private:
  // The end-of-run summary of `history` (steps of this run), timed from `start`.
  RunSummary run_summary(const std::vector<StepMetrics>& history, std::chrono::steady_clock::time_point start) const;
  // Samples at or past `scored_windows` (counted over the whole run of batches) get targets of -1: not
  // scored.
  void fill_micro_batch(const BatchSampler& sampler, int64_t step0, int64_t micro_batch, int32_t* inputs,
                        int32_t* targets, int64_t scored_windows = INT64_MAX) const;
  // train.sample_every: a sample of the model's text, logged; the same on every rank (collective).
  std::string sample_text(int64_t step);
  // The DP gradient reducer, and the first elements of each chunk it must leave to reduce_deferred().
  void make_gradient_reducer();
  // This rank's chunks from the counter-based initialisation or model.init_from, slice by slice.
  void initialise_parameters();
  void publish_working_copy();
  // Rank 0 writes every rank's timeline; returns the failure, if any, on every rank.
  OutputFailure write_trace() const;
  // runtime.op_profile: every rank's table of `steps` steps (rank 0 writes the file and logs its own);
  // returns the failure, if any, on every rank.
  OutputFailure write_op_profile(int64_t steps, double step_ms) const;
  // Gathers every rank's `mine` on world rank 0, which writes compose(all of them, in rank order) to `path`
  // atomically and logs `written` (a format string of the path); the failure, if any, on every rank.
  OutputFailure write_gathered(const char* what, const std::string& path, const std::string& mine,
                               const std::function<std::string(const std::vector<std::string>&)>& compose,
                               const char* written) const;

  Config cfg_;
  std::unique_ptr<ProfiledKernels> profiled_;  // runtime.op_profile: k_ is this wrapper of the backend's queue
  Kernels& k_;
  ParallelMesh* mesh_;
  GptShapes shapes_;
  std::vector<std::unique_ptr<GptModel>> chunks_;
  std::unique_ptr<Bf16WorkingCopy> working_copy_;  // train.precision = "bf16" with bf16 parameters, below ZeRO-3
  std::vector<std::unique_ptr<AdamW>> optimizers_;
  std::unique_ptr<PipelineExecutor> executor_;
  std::unique_ptr<GradientReducer> reducer_;  // dp > 1 only
  TrainingData data_;
  std::unique_ptr<GradientFinisher> finisher_;
  double flops_per_token_ = 0;
  double peak_tflops_ = 0;
  std::string peak_source_;  // where peak_tflops_ came from (train/peak_throughput.hpp)
  bool mfu_warned_ = false;  // a step passed the reference (mfu_above_peak_warning): said once
  double pipeline_wait_s_ = 0;
  std::chrono::milliseconds slow_step_{0};  // TRIDENT_INJECT_FAULT=slow-step:MS (a slow rank, for the tests)
  std::unique_ptr<TrainingCheckpoints> checkpoints_;
  std::unique_ptr<StopSignals> stop_;
  std::unique_ptr<TrainingSamples> samples_;
  int exit_code_ = 0;
  int64_t first_step_ = 1;  // 1, or the step after the one the resumed checkpoint completed
};

}  // namespace trident
