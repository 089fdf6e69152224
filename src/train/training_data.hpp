#pragma once
// The training and validation data of a deck, opened the one way `train` and `check` share.
#include <memory>

#include "data/dataset.hpp"
#include "core/config.hpp"

namespace trident {

struct TrainingData {
  std::unique_ptr<TokenStream> train_stream, val_stream;    // val_stream: null without data.val_path
  std::unique_ptr<BatchSampler> train_sampler, val_sampler;  // samplers refer to the streams above
};

// Maps the files and checks they hold at least one window; throws trident::Error naming the file.
TrainingData open_training_data(const Config& cfg);

}  // namespace trident
