#pragma once
// Gradient finishing: everything between the last backward of a step and the optimizer update, in one
// place (what Megatron-Core calls finalize_model_grads). The reductions share the gradient buffers and
// must never run two on one range at once, so the order is fixed; all are sums, so it does not change
// the result beyond rounding. The phases, in order (one that has nothing to do in a layout is skipped):
//   dp_buckets      wait for the DP bucket reductions that backward hooks started (GradientReducer)
//   tp_replicated   sequence parallelism: the replicated parameters' gradients summed over TP; k/v slices replicated
//                   on several ranks (tp > kv_heads): summed over their replicas
//   tied_embedding  a tied embedding held by the first and the last stage: summed over the two
//   dp_deferred     that embedding's DP reduction, which had to wait for the cross-stage sum
//   norm            the global gradient norm: each rank's (ZeRO) range, summed over DP, TP and PP
//   clip            each rank's range scaled so that the norm is at most train.grad_clip
// Where the norm needs no sum over ranks (no TP, PP or ZeRO: each rank holds the whole gradient), it
// and the clip stay in backend memory and the host reads the norm once, after the update is queued
// (take_norm): nothing in the step waits for the device. Otherwise the square sums go to the host for
// MPI's sums and finish() waits for them.
#include <memory>
#include <string>
#include <vector>

#include "comm/mesh.hpp"
#include "data_parallel/grad_reducer.hpp"
#include "kernels.hpp"
#include "model/gpt.hpp"
#include "optim/adamw.hpp"

namespace trident {

class GradientFinisher {
 public:
  // `reducer` is null without data parallelism; `mesh` is null in a serial run.
  GradientFinisher(const GptShapes& shapes, Kernels& kernels, ParallelMesh* mesh,
                   const std::vector<std::unique_ptr<GptModel>>& chunks,
                   const std::vector<std::unique_ptr<AdamW>>& optimizers, GradientReducer* reducer);
  ~GradientFinisher();
  GradientFinisher(const GradientFinisher&) = delete;
  GradientFinisher& operator=(const GradientFinisher&) = delete;

  // Runs (queues) the phases.
  void finish(double grad_clip);
  // The global gradient norm before clipping of the last finish(); waits for it where it was left in
  // backend memory.
  double take_norm();
  // The phases the last finish() ran, in order (the names above).
  const std::vector<std::string>& last_phases() const { return phases_; }

 private:
  void reduce_tied_embedding();
  bool sharded_gradients() const { return reducer_ && reducer_->zero() >= 2; }  // zero 2, 3
  // Chunk c's gradients of its optimizer's range (element k is flat element begin + k).
  float* range_gradients(size_t c);
  bool norm_needs_host() const;
  void add_square_sums();
  double host_norm();

  GptShapes shapes_;
  Kernels& k_;
  ParallelMesh* mesh_;
  const std::vector<std::unique_ptr<GptModel>>& chunks_;
  const std::vector<std::unique_ptr<AdamW>>& optimizers_;
  GradientReducer* reducer_;
  double* norm_sums_ = nullptr;  // backend memory: squared gradient sums {sharded, replicated} of a step
  float* clip_coef_ = nullptr;   // backend memory: the clip's factor (norm left there)
  double norm_ = 0;              // the norm, once the host has it
  bool norm_pending_ = false;    // the norm is still in norm_sums_
  std::vector<std::string> phases_;
};

}  // namespace trident
