#include "train/training_data.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace trident {

TrainingData open_training_data(const Config& cfg) {
  const auto& d = cfg.data;
  if (d.path.empty()) throw Error(fmt::format("{}: [data] path is empty: `train` needs training data", cfg.source));
  TrainingData data;
  data.train_stream = open_token_stream(d.format, d.path, cfg.model.vocab_size);
  data.train_sampler = std::make_unique<BatchSampler>(*data.train_stream, d.order, d.seed, cfg.model.seq_len,
                                                      cfg.train.global_batch);
  if (!d.val_path.empty()) {
    data.val_stream = open_token_stream(d.format, d.val_path, cfg.model.vocab_size);
    data.val_sampler = std::make_unique<BatchSampler>(*data.val_stream, DataOrder::Sequential, d.seed,
                                                      cfg.model.seq_len, cfg.train.global_batch);
  }
  return data;
}

}  // namespace trident
