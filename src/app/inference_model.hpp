#pragma once
// The model of a checkpoint (or of model.init_from) held forward-only by every rank of one tensor-parallel
// group, for the commands that run it token by token: `generate` and `eval --hellaswag`. The deck's mesh
// is replaced by tp = the world, pp = dp = 1 (the checkpoint is resharded to it as a resumed run's would be),
// with whole parameters (no ZeRO) and the smallest training buffers; nothing is written and no lock taken.
#include <memory>
#include <string>

#include "app/commands.hpp"
#include "backend.hpp"
#include "comm/mesh.hpp"
#include "comm/watchdog.hpp"
#include "train/trainer.hpp"

namespace trident {

// The deck as these commands run it, and in *checkpoint the checkpoint to read ("" for model.init_from;
// see model_checkpoint). `checkpoint_arg` may also name an export (`ckpt export`'s directory or its
// model.safetensors): it is then read as model.init_from. `verb` says what the command does, for the message when there is no model.
Config load_inference_deck(const DeckArgs& args, const std::string& checkpoint_arg, const char* verb,
                           std::string* checkpoint);

class InferenceModel {
 public:
  explicit InferenceModel(const Config& cfg);  // collective over the world
  ~InferenceModel();
  GptModel& model() { return trainer_->model(); }
  // The model's whole parameters in backend memory (a decoder's): its own buffer, or a bf16 working
  // copy's values widened once into one held here.
  const float* parameters();
  Kernels& kernels() { return backend_->kernels(); }
  Group* tp() { return cfg_.mesh.tp > 1 ? &mesh_->tp() : nullptr; }

 private:
  Config cfg_;
  watchdog::Monitor monitor_;
  std::unique_ptr<ParallelMesh> mesh_;
  std::unique_ptr<ComputeBackend> backend_;
  std::unique_ptr<Trainer> trainer_;
  float* widened_ = nullptr;
};

}  // namespace trident
