#pragma once
// Checkpoints of a training run: what the Trainer calls at start-up (resume) and after each step
// (write when the schedule says so). The file format, atomicity and resharding are src/checkpoint's
// (docs/checkpoints.md); this class maps the trainer's chunks and optimizers onto RankShards, stages
// them through host memory and logs what it did.
#include <memory>
#include <string>
#include <vector>

#include <mpi.h>

#include "checkpoint/checkpoint.hpp"
#include "comm/mesh.hpp"
#include "core/config.hpp"
#include "data_parallel/grad_reducer.hpp"
#include "kernels.hpp"
#include "model/gpt.hpp"
#include "optim/adamw.hpp"

namespace trident {
namespace ckpt {
class DirectoryLock;
}

class TrainingCheckpoints {
 public:
  // chunks[c] and optimizers[c]: this rank's pipeline chunks and their AdamWs (the trainer's; they
  // must outlive this object). mesh null: a serial run. Collective over the mesh's world (or
  // MPI_COMM_WORLD without a mesh). Signals become checkpoint requests in the trainer
  // (train/stop_signals.hpp calls request_checkpoint() on every rank at the agreed step).
  // `reducer` (null without DP) holds the parameters under ZeRO-3: a checkpoint gathers each chunk's
  // over DP, a resume keeps this rank's range.
  TrainingCheckpoints(const Config& cfg, Kernels& kernels, ParallelMesh* mesh,
                      const std::vector<std::unique_ptr<GptModel>>& chunks,
                      const std::vector<std::unique_ptr<AdamW>>& optimizers, GradientReducer* reducer = nullptr);
  ~TrainingCheckpoints();
  TrainingCheckpoints(const TrainingCheckpoints&) = delete;
  TrainingCheckpoints& operator=(const TrainingCheckpoints&) = delete;

  // Collective. Restores parameters and AdamW moments from what checkpoint.resume designates and
  // returns the step that checkpoint completed (training continues at the next one); 0 when the run
  // starts fresh. Throws CheckpointError when checkpoints exist and none is valid.
  int64_t resume();

  // Collective. After step `step` (with its loss): writes a checkpoint if the schedule says so.
  void after_step(int64_t step, double loss);

  // The last checkpoint this run wrote ("" when none) and the step it holds.
  const std::string& last_written() const { return last_written_; }
  int64_t last_written_step() const { return last_written_step_; }

 private:
  // Host copies of this rank's state, one RankShard per chunk pointing into them.
  struct Staging {
    std::vector<std::unique_ptr<float[]>> buffers;
    std::vector<RankShard> shards;
    bool in_place = false;  // the shards point at the backend's own (host) buffers
  };
  // A load fills every chunk's whole parameters (a bf16 run's masters and ZeRO-3's partitions are
  // taken from them); a write takes the parameters from where the optimizer keeps them, range by range.
  enum class StagingFor { Load, Write };
  Staging make_staging(StagingFor use) const;
  // Whether the values to save are kept over the optimizer's range (ZeRO-3's partitions, a bf16 working
  // copy's fp32 masters) rather than in the model's whole parameters, and chunk c's range of them.
  bool parameters_kept_in_range() const;
  float* parameters_in_range(size_t c) const;

  Config cfg_;
  Kernels& k_;
  ParallelMesh* mesh_;
  const std::vector<std::unique_ptr<GptModel>>& chunks_;
  const std::vector<std::unique_ptr<AdamW>>& optimizers_;
  GradientReducer* reducer_;
  bool zero3_ = false;
  MPI_Comm comm_;
  CheckpointSchedule schedule_;
  std::unique_ptr<ckpt::DirectoryLock> lock_;
  std::string last_written_;
  int64_t last_written_step_ = 0;  // rank 0's hold on checkpoint.dir (checkpoint/directory_lock.hpp)
};

}  // namespace trident
