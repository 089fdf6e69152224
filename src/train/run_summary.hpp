#pragma once
// What a training run says about its data passes and at its end: the epoch of the training data (the
// sampler wraps around when the data is used up: sequentially from token 0, or shuffled anew) and a
// final summary (steps, wall time, tokens/s, final losses, epochs, the checkpoint written).
#include <cstdint>
#include <optional>
#include <string>

namespace trident {

class BatchSampler;

// Whole passes over the training data completed by steps 1..`steps`, by the sampler's mapping
// (data/dataset.hpp): windows read / whole windows of the data (shuffle), tokens advanced / tokens of
// the stream (sequential). `stream_tokens`: the training stream's size.
int64_t epochs_completed(const BatchSampler& sampler, int64_t stream_tokens, int64_t steps);
// The same as a fraction (e.g. 2.33 epochs).
double epochs_read(const BatchSampler& sampler, int64_t stream_tokens, int64_t steps);

// The log line for the epochs that step `step` completed; empty when it completed none.
std::string epoch_end_line(const BatchSampler& sampler, int64_t stream_tokens, int64_t step);

struct RunSummary {
  int64_t first_step = 1, last_step = 0, planned_steps = 0;  // steps first_step..last_step ran
  double wall_s = 0;
  int64_t tokens = 0;            // tokens trained on by this run
  double final_loss = 0;         // training loss of the last step
  bool has_val_data = false;     // data.val_path given
  std::optional<double> val_loss;  // the last validation loss measured, at val_step
  int64_t val_step = 0;
  double epochs = 0;             // passes over the training data after the last step
  std::string checkpoint;        // the last checkpoint this run wrote, "" when none
  int64_t checkpoint_step = 0;
  bool checkpoints_on = false;   // checkpoint.dir given
};

// "run summary: ..." (one line).
std::string format_run_summary(const RunSummary& s);

}  // namespace trident
