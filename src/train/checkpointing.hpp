#pragma once
// Checkpoints of a training run: what the Trainer calls at start-up (resume) and after each step
// (write when the schedule says so). The file format, atomicity and resharding are src/checkpoint's
// (docs/checkpoints.md); this class maps the trainer's chunks and optimizers onto RankShards, stages
// them through host memory and logs what it did.
#include <signal.h>
#include <memory>
#include <vector>

#include <mpi.h>

#include "checkpoint/checkpoint.hpp"
#include "comm/mesh.hpp"
#include "deck/config.hpp"
#include "kernels.hpp"
#include "model/gpt.hpp"
#include "optim/adamw.hpp"

namespace trident {

class TrainingCheckpoints {
 public:
  // chunks[c] and optimizers[c]: this rank's pipeline chunks and their AdamWs (the trainer's; they
  // must outlive this object). mesh null: a serial run. Collective over the mesh's world (or
  // MPI_COMM_WORLD without a mesh). With checkpoint.dir set, SIGUSR1 asks for a checkpoint at the
  // end of the current step (Slurm: sbatch --signal=USR1@<seconds>).
  TrainingCheckpoints(const Config& cfg, Kernels& kernels, ParallelMesh* mesh,
                      const std::vector<std::unique_ptr<GptModel>>& chunks,
                      const std::vector<std::unique_ptr<AdamW>>& optimizers);
  ~TrainingCheckpoints();
  TrainingCheckpoints(const TrainingCheckpoints&) = delete;
  TrainingCheckpoints& operator=(const TrainingCheckpoints&) = delete;

  // Collective. Restores parameters and AdamW moments from what checkpoint.resume designates and
  // returns the step that checkpoint completed (training continues at the next one); 0 when the run
  // starts fresh. Throws CheckpointError when checkpoints exist and none is valid.
  int64_t resume();

  // Collective. After step `step` (with its loss): writes a checkpoint if the schedule says so.
  void after_step(int64_t step, double loss);

 private:
  // Host copies of this rank's state, one RankShard per chunk pointing into them.
  struct Staging {
    std::vector<std::unique_ptr<float[]>> buffers;
    std::vector<RankShard> shards;
  };
  Staging make_staging() const;

  Config cfg_;
  Kernels& k_;
  ParallelMesh* mesh_;
  const std::vector<std::unique_ptr<GptModel>>& chunks_;
  const std::vector<std::unique_ptr<AdamW>>& optimizers_;
  MPI_Comm comm_;
  CheckpointSchedule schedule_;
  bool handler_installed_ = false;
  struct sigaction previous_usr1_ {};
};

}  // namespace trident
