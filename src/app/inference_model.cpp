#include "app/inference_model.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <filesystem>

#include "app/backend_startup.hpp"
#include "app/memory_check.hpp"
#include "train/preflight.hpp"

namespace trident {
namespace {

// `ckpt export`'s output (its directory, or the model.safetensors in it) or a Hugging Face model directory
// with sharded weights, given where a checkpoint goes: the weights to read as model.init_from; "" for
// anything else.
std::string exported_weights(const std::string& arg) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string suffix = ".safetensors";
  if (arg.size() > suffix.size() && arg.compare(arg.size() - suffix.size(), suffix.size(), suffix) == 0) return arg;
  if (fs::is_directory(arg, ec) && fs::exists(fs::path(arg) / "model.safetensors", ec))
    return (fs::path(arg) / "model.safetensors").string();
  if (fs::is_directory(arg, ec) && fs::exists(fs::path(arg) / "model.safetensors.index.json", ec)) return arg;
  return "";
}

}  // namespace

Config load_inference_deck(const DeckArgs& args, const std::string& checkpoint_arg, const char* verb,
                           std::string* checkpoint) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  DeckArgs deck = args;
  for (const std::string& set :
       {fmt::format("mesh.tp={}", world), std::string("mesh.pp=1"), std::string("mesh.dp=1"),
        std::string("mesh.virtual_stages=1"), std::string("mesh.schedule=1f1b"), std::string("mesh.zero=0"),
        std::string("mesh.sequence_parallel=false"), std::string("train.micro_batch=1"),
        std::string("train.global_batch=1"), std::string("train.recompute=full")})
    deck.overrides.push_back(set);
  Config cfg = load_deck_logged(deck, DeckOptions{world});
  if (const std::string weights = exported_weights(checkpoint_arg); !weights.empty()) {
    cfg.model.init_from = weights;
    checkpoint->clear();
  } else {
    *checkpoint = model_checkpoint(checkpoint_arg, cfg, verb);
  }
  cfg.checkpoint.resume = checkpoint->empty() ? "never" : *checkpoint;
  cfg.checkpoint.dir.clear();
  cfg.checkpoint.every_steps = 0;
  cfg.checkpoint.every_minutes = 0;
  cfg.runtime.metrics.clear();
  cfg.runtime.trace.clear();
  cfg.runtime.op_profile.clear();
  cfg.train.sample_every = 0;
  check_supported(cfg);
  return cfg;
}

InferenceModel::InferenceModel(const Config& cfg)
    : cfg_(cfg), monitor_(cfg.runtime.collective_timeout_s, cfg.runtime.checkpoint_timeout_s) {
  mesh_ = make_mesh(cfg_);
  check_memory_fits(cfg_, mesh_->node().local_size);
  backend_ = start_backend_on(*mesh_, cfg_);
  trainer_ = std::make_unique<Trainer>(cfg_, backend_->kernels(), mesh_.get(), Trainer::Use::ModelOnly);
}

InferenceModel::~InferenceModel() {
  if (widened_) kernels().free(widened_);
}

const float* InferenceModel::parameters() {
  if (model().params()) return model().params();
  if (!widened_) {
    widened_ = kernels().alloc(model().layout().total());
    trainer_->working_copy()->widen(0, widened_);
  }
  return widened_;
}

}  // namespace trident
