#pragma once
// Step time of one layout, itemised (docs/planner.md has the formulas and their sources).
#include <cstdint>
#include <vector>

#include "core/config.hpp"
#include "planner/cluster.hpp"
#include "planner/layout.hpp"
#include "planner/memory_model.hpp"

namespace trident::planner {

// Pipeline bubble as a fraction of the ideal (bubble-free) time (Narayanan et al. 2021, Sec. 2.2):
// (pp - 1)/m for GPipe and 1F1B, (pp - 1)/(v*m) for the interleaved schedule; 0 when pp = 1.
double pipeline_bubble_fraction(Schedule schedule, int pp, int64_t m, int v);

// Ring collectives over n ranks (Thakur et al. 2005; NCCL's bus-bandwidth convention). `bytes` is the
// full buffer (the all-gather's output, the reduce-scatter's input).
double allreduce_seconds(double bytes, int n, const LinkSpec& link);
double allgather_seconds(double bytes, int n, const LinkSpec& link);
double reduce_scatter_seconds(double bytes, int n, const LinkSpec& link);
double p2p_seconds(double bytes, const LinkSpec& link);

// Achievable GEMM rate (FLOP/s) for GEMMs of `gemm_flops` each: peak * efficiency * W/(W + W_half).
double gemm_rate(const ClusterSpec& c, const TrainConfig& train, double gemm_flops);

struct StageTime {  // one micro-batch (forward + backward) on one stage
  double forward = 0, backward = 0, recompute = 0;  // GEMM compute
  double elementwise = 0;                          // memory-bound kernels
  double tp_comm = 0;
  double pp_p2p = 0;
  double dp_comm = 0;  // zero 2: the exposed part of this micro-batch's gradient reduce-scatter
  double total() const { return forward + backward + recompute + elementwise + tp_comm + pp_p2p + dp_comm; }
};

struct TimeBreakdown {
  int critical_stage = 0;          // the slowest stage (sets the pipeline clock)
  int tail_stage = 0;              // the stage that ends the step last (DP reduction, optimizer)
  int64_t micro_batches = 1;
  double per_microbatch = 0;       // pipeline clock: the slowest stage's time per micro-batch
  // Per step on the critical stage (micro-batch figures times m):
  double compute_forward = 0, compute_backward = 0, compute_recompute = 0;
  double elementwise = 0;
  double tp_comm = 0;
  double pp_p2p = 0;
  double dp_in_clock = 0;          // zero 2: exposed per-micro-batch reduce-scatters (m x the stage's)
  double pp_bubble = 0;            // (pp-1)/v * per_microbatch
  double bubble_fraction = 0;      // pp_bubble / ideal pipeline time
  // After the last backward (on the tail stage):
  double dp_comm = 0;              // gradient reduction per step (all-reduce; zero 2: m reduce-scatters)
  double dp_comm_exposed = 0;      // what is not hidden behind the backward pass (zero 2: dp_in_clock)
  double zero_allgather = 0;       // parameter all-gather after the step (zero 1, 2)
  double embedding_sync = 0;       // tied-embedding gradient all-reduce between first and last stage
  double optimizer = 0;            // AdamW update (memory-bound)
  double after_flush = 0;          // the step's tail: the above on the tail stage, less its slack
  double step = 0;
  double oversubscription = 1;     // ranks sharing one device
  std::vector<StageTime> stages;
  // Throughput.
  double tokens_per_s = 0;
  double model_flops = 0;          // per step, whole job, without recompute
  double hardware_flops = 0;       // per step, whole job, with recompute and the padded vocabulary
  double tflops_per_gpu = 0;       // model FLOPs / step / devices
  double mfu = 0;                  // tflops_per_gpu / peak (recompute not counted)
  double hfu = 0;                  // the same with recompute counted
  double peak_tflops = 0;
};

TimeBreakdown estimate_time(const Config& cfg, const ClusterSpec& cluster, const Layout& l, const Placement& placement,
                            const MemoryEstimate& memory);

}  // namespace trident::planner
