#pragma once
// The header and metadata of a checkpoint (internal): the scalar attributes written with every
// checkpoint, the header broadcast as JSON from the rank that read it, and the checks of a header
// against the model a run needs. read_checkpoint_header (checkpoint.hpp) reads it.
#include <hdf5.h>

#include <nlohmann/json.hpp>
#include <string>

#include "checkpoint/checkpoint.hpp"

namespace trident::ckpt {

nlohmann::json to_json(const CheckpointHeader& h);
CheckpointHeader from_json(const nlohmann::json& j);

// model.ffn_hidden, or 4 x hidden when unset.
int64_t resolved_ffn(const ModelConfig& m);

// Throws CheckpointError naming the file and dataset when the checkpoint does not hold every tensor
// of model m with its shape (and the optimizer groups when need_optimizer), or holds other ones.
void check_fits(const CheckpointHeader& h, const ModelConfig& m, bool need_optimizer);

// The root attributes and the /train, /rng, /lr_schedule, /data, /layout, /model, /optim groups.
void write_scalars(hid_t file, const Config& cfg, const TrainingProgress& p, int world_size, bool has_optimizer,
                   bool has_master, const std::string& path);

}  // namespace trident::ckpt
