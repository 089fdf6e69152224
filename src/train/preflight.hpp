#pragma once
// What `trident train` refuses before it starts anything, in one place that `trident check` calls too,
// so that "deck OK" means the run will start: what this build cannot run yet (NotImplemented: the cuda
// backend in a CPU build, GPU communication, bf16) and training or validation data that is missing or
// too short (Error naming the file). The deck itself, and the world size, are checked by load_deck.
#include "core/config.hpp"

namespace trident {

// What this build cannot run yet (NotImplemented) or cannot run at all (Error).
void check_supported(const Config& cfg);

// The metrics and trace files can be written (world rank 0 writes them): fails now, not after the last
// step. (checkpoint.dir is checked by TrainingCheckpoints.)
void check_output_paths(const Config& cfg);

// model.init_from (opened and its header parsed), checkpoint.dir (check_checkpoint_dir: no directory
// is created) and a checkpoint.resume path (its structure read), as `train` reads them: a special file
// (/dev/zero, a FIFO) or /proc/self/mem is refused here as it is there.
void check_checkpoint_and_model_paths(const Config& cfg);

// check_supported, the output paths, the checkpoint and model paths, then the training and validation
// data opened as the trainer opens them.
void check_trainable(const Config& cfg);

}  // namespace trident
