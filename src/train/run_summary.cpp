#include "train/run_summary.hpp"

#include <fmt/format.h>

#include <utility>

#include "data/dataset.hpp"

namespace trident {
namespace {

// What one step reads, in the unit of an epoch: (numerator per step, denominator per epoch).
std::pair<int64_t, int64_t> per_step_and_epoch(const BatchSampler& s, int64_t stream_tokens) {
  if (s.order() == DataOrder::Shuffle) return {s.global_batch(), s.windows_per_epoch()};
  return {s.global_batch() * s.seq_len(), stream_tokens};
}

}  // namespace

int64_t epochs_completed(const BatchSampler& sampler, int64_t stream_tokens, int64_t steps) {
  const auto [per_step, per_epoch] = per_step_and_epoch(sampler, stream_tokens);
  return per_epoch > 0 ? steps * per_step / per_epoch : 0;
}

double epochs_read(const BatchSampler& sampler, int64_t stream_tokens, int64_t steps) {
  const auto [per_step, per_epoch] = per_step_and_epoch(sampler, stream_tokens);
  return per_epoch > 0 ? double(steps) * double(per_step) / double(per_epoch) : 0.0;
}

std::string epoch_end_line(const BatchSampler& sampler, int64_t stream_tokens, int64_t step) {
  const int64_t before = epochs_completed(sampler, stream_tokens, step - 1);
  const int64_t after = epochs_completed(sampler, stream_tokens, step);
  if (after == before) return "";
  const bool shuffled = sampler.order() == DataOrder::Shuffle;
  return fmt::format("data: {} of the training data ended in step {} ({} per epoch); the data wraps around: {}",
                     after - before == 1 ? fmt::format("epoch {}", after) : fmt::format("epochs {}-{}", before + 1, after),
                     step,
                     shuffled ? fmt::format("{} windows", sampler.windows_per_epoch())
                              : fmt::format("{} tokens", stream_tokens),
                     shuffled ? "the next epoch reads it again in a new order" : "reading it again from the start");
}

std::string format_run_summary(const RunSummary& s) {
  const int64_t steps = s.last_step - s.first_step + 1;
  std::string val = "no validation data";
  if (s.val_loss)
    val = fmt::format("final validation loss {:.4f} (step {})", *s.val_loss, s.val_step);
  else if (s.has_val_data)
    val = "no validation loss measured (data.val_every)";
  std::string ckpt;
  if (!s.checkpoint.empty())
    ckpt = fmt::format("checkpoint {} (step {})", s.checkpoint, s.checkpoint_step);
  else
    ckpt = s.checkpoints_on ? "no checkpoint written by this run" : "no checkpoint (no checkpoint.dir)";
  return fmt::format(
      "run summary: {} step(s) ({}-{} of {}) in {:.3f} s wall, {:.0f} tokens/s | final training loss {:.4f} | {} | "
      "{:.2f} epoch(s) of the training data | {}",
      steps, s.first_step, s.last_step, s.planned_steps, s.wall_s, s.wall_s > 0 ? double(s.tokens) / s.wall_s : 0.0,
      s.final_loss, val, s.epochs, ckpt);
}

}  // namespace trident
