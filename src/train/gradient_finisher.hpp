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

  // Runs the phases; returns the global gradient norm before clipping.
  double finish(double grad_clip);
  // The phases the last finish() ran, in order (the names above).
  const std::vector<std::string>& last_phases() const { return phases_; }

 private:
  void reduce_tied_embedding();
  bool sharded_gradients() const { return reducer_ && reducer_->zero() >= 2; }  // zero 2, 3
  // Chunk c's gradients of its optimizer's range (element k is flat element begin + k).
  float* range_gradients(size_t c);
  double global_norm();

  GptShapes shapes_;
  Kernels& k_;
  ParallelMesh* mesh_;
  const std::vector<std::unique_ptr<GptModel>>& chunks_;
  const std::vector<std::unique_ptr<AdamW>>& optimizers_;
  GradientReducer* reducer_;
  double* norm_sums_ = nullptr;  // backend memory: squared gradient sums {sharded, replicated} of a step
  std::vector<std::string> phases_;
};

}  // namespace trident
