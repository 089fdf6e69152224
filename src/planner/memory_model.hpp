#pragma once
// Memory per device of one layout, itemised, for every pipeline stage (docs/planner.md has the
// formulas and their sources). All figures are bytes; reports print GB = 1e9 bytes.
#include <cstdint>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "planner/cluster.hpp"
#include "planner/layout.hpp"

namespace trident::planner {

constexpr double kGB = 1e9;               // reports and the seeds' figures use decimal GB
constexpr double kGiB = 1073741824.0;     // device capacities (nvidia-smi) are binary
constexpr double kMiB = 1048576.0;        // mesh.bucket_mb

// Where the ranks of a layout land on the cluster (rank order from mesh.order).
struct Placement {
  int nodes = 1;               // nodes used
  int ranks_per_node = 1;
  int devices_used = 1;
  double share = 1.0;          // fraction of a device each rank gets (< 1 only when oversubscribed)
  bool tp_intra = true;        // every TP group inside one node
  bool pp_intra = true;        // every PP group inside one node
  bool dp_intra = true;        // every DP group inside one node
};

// `nodes` > 0 overrides the cluster's node count (0 = the cluster's, or as many as the layout needs when
// the cluster leaves it open). Throws trident::Error when the layout needs more devices than there are
// and the cluster does not allow oversubscription.
Placement place(const ClusterSpec& cluster, const Layout& l, const std::string& order, int nodes = 0);

// Whether every group along `dim` ("tp", "pp" or "dp") stays inside one node of `ranks_per_node` ranks
// when ranks are numbered by `order` (fastest-varying first).
bool group_within_node(const std::string& order, const std::string& dim, int tp, int pp, int dp, int ranks_per_node);

// Model states per device (the ZeRO paper's accounting, Rajbhandari et al. 2020, Sec. 3.1 and 5):
// bf16: 2-byte weights and gradients, fp32 master weights (4) and Adam moments (4 + 4);
// fp32: 4-byte weights and gradients, Adam moments (4 + 4), no master copy.
// zero 1 divides master weights and moments by dp; zero 2 also divides the gradients; zero 3 the
// parameters too.
struct ModelStateBytes {
  double parameters = 0;
  double gradients = 0;
  double master_weights = 0;
  double optimizer_moments = 0;
  double optimizer() const { return master_weights + optimizer_moments; }
  double total() const { return parameters + gradients + master_weights + optimizer_moments; }
};
ModelStateBytes model_state_bytes(double params_on_rank, Precision precision, int zero, int dp);

// Bytes per element of what trident holds and moves under train.precision (model/gpt.hpp). fp32: 4
// throughout. bf16: the activations a layer keeps for backward take 2, but the residual stream, the
// parameters and gradients (fp32; the parameters are AdamW's masters, no bf16 working copy yet) and every
// communicated tensor take 4. model_state_bytes' BF16 (bf16 parameters and gradients, fp32 masters) is the
// mixed-precision accounting of Megatron-LM and ZeRO, not yet trident's.
struct StorageBytes {
  double saved_activation = 4, residual = 4, communicated = 4;
};
StorageBytes storage_bytes(Precision precision);

// Activation bytes one transformer layer keeps for one micro-batch until its backward pass
// (Korthikanti et al. 2022, Sec. 4, generalised to `elem_bytes` per activation and optional dropout):
//   no recompute, no TP:        sbh(34 + 5as/h)                   (16-bit activations, with dropout)
//   TP t:                       sbh(10 + 24/t + 5as/(ht))
//   TP t + sequence parallel:   sbh(34/t + 5as/(ht))
//   selective recompute:        the as^2 term is dropped (recomputed): sbh(10 + 24/t) / sbh*34/t with SP
//   full recompute:             only the layer input, 2sbh (2sbh/t with SP)
// s = seq_len, b = micro_batch, h = hidden, a = heads. Generalised: each stored tensor costs elem_bytes
// per element, each dropout mask 1 byte; the paper's case is elem_bytes = 2, dropout = true.
struct ActivationShape {
  double seq = 0, micro_batch = 1, hidden = 0, heads = 1;
  double ffn = 0;  // MLP inner width; 0 = 4*hidden (the paper's case)
  double kv_hidden = 0;  // width of K (and of V): kv_heads * head size; 0 = hidden (multi-head attention)
  bool swiglu = false;   // the MLP keeps gate and up (2*ffn) and their product (ffn) instead of GELU's 2*ffn
  int tp = 1;
  bool sequence_parallel = false;
  double elem_bytes = 2;
  double residual_bytes = 0;  // the two LayerNorm inputs (the residual stream); 0: elem_bytes
  bool dropout = true;
  // Flash-style attention (trident's kernels): the softmax is never stored; backward recomputes it
  // from the per-row log-sum-exp, a*s*b fp32 values (split by heads), which replace the as^2 terms.
  bool flash_attention = false;
};
double layer_activation_bytes(const ActivationShape& a, Recompute recompute);
// The part of the no-recompute figure that selective recompute drops (the attention-score tensors; the
// log-sum-exp with flash_attention).
double attention_score_bytes(const ActivationShape& a);

// Micro-batches whose activations a stage holds at its peak (Narayanan et al. 2021; issue 5's
// definitions): GPipe m; 1F1B min(pp - stage, m); interleaved: chunks in flight
// min(2(pp - stage - 1) + (v - 1)pp + 1, v*m), each of 1/v of the stage's layers, i.e. for stage 0
// pp(1 + (pp-1)/(v*pp)) micro-batch equivalents (Korthikanti's factor 1 + (p-1)/(pm)); pp = 1 keeps one
// (gradient accumulation runs forward and backward per micro-batch) except GPipe, which keeps m.
double microbatches_in_flight(Schedule schedule, int pp, int stage, int64_t m, int v);

// Trident's model (GPT-2 blocks) has no dropout; the paper's formulas are the `dropout = true` case.
constexpr bool kTridentDropout = false;
// Trident's attention kernels are flash-style on every backend (kernels/kernels.hpp).
constexpr bool kTridentFlashAttention = true;

struct StageMemory {
  int stage = 0;
  int64_t layers = 0;
  double params = 0;              // parameters held (count)
  double in_flight = 0;           // micro-batch equivalents of activations held
  double per_layer_activation = 0;  // bytes per layer per micro-batch (with the layout's recompute)
  ModelStateBytes states;
  double activations = 0;         // in_flight * layers * per_layer_activation
  double edge_activations = 0;    // LM head (final LN, head input, fp32 logits) / embedding extras
  double recompute_working = 0;   // one layer's recomputed activations during its backward
  double comm_buffers = 0;        // DP buckets, PP send/receive buffers, SP all-gather buffer
  double gemm_copies = 0;         // rounded GEMM operands (gemm_operand_copy_bytes)
  double reserved = 0;            // cluster.reserved_gib
  // The categories `trident train` reports for each rank (train/metrics.hpp, MemoryAccount).
  double parameters() const { return states.parameters; }
  double gradients() const { return states.gradients; }
  double optimizer_state() const { return states.optimizer(); }
  double all_activations() const { return activations + edge_activations + recompute_working; }
  double buffers() const { return comm_buffers + gemm_copies; }
  double runtime() const { return reserved; }
  double total() const {
    return parameters() + gradients() + optimizer_state() + all_activations() + buffers() + runtime();
  }
};

struct MemoryEstimate {
  std::vector<StageMemory> stages;
  int peak_stage = 0;
  double capacity = 0;  // bytes per rank
  bool fits = false;
  const StageMemory& peak() const { return stages.at(peak_stage); }
  double peak_bytes() const { return peak().total(); }
};

// Layers of each pipeline stage (sum of its v chunks): mesh.layers_per_stage when it matches the
// layout; otherwise, without interleaving, balanced by estimated cost (the last stage's LM head counted
// as its forward FLOPs in layer equivalents, the remaining layers spread evenly, earlier stages taking
// the remainder); with interleaving, equal chunks (chunk c gets floor(L/C), the first L mod C one more).
std::vector<int64_t> stage_layers(const Config& cfg, const Layout& l);

// Parameter counts held by one rank: a transformer layer (TP-split matrices, replicated LayerNorms and
// row-parallel biases), the first stage's embeddings, the last stage's final LN and head copy.
double layer_params_per_rank(const ModelConfig& m, int tp);
double stage_params_per_rank(const ModelConfig& m, const Layout& l, int stage, int64_t layers);
// Of those, what the model reads in fp32, which a bf16 working copy keeps in fp32 besides: the 1-D
// tensors (biases and norms) and the position embedding (model/fp32_tensors.hpp).
double layer_vector_params_per_rank(const ModelConfig& m, int tp);
double stage_fp32_copy_params_per_rank(const ModelConfig& m, const Layout& l, int stage, int64_t layers);

// ZeRO-2's gradient memory beside the partition (gradients / dp): staging for the largest backward
// segment and one layer in flight, plus a tied embedding's whole gradient on the two stages sharing it.
double zero2_gradient_staging_bytes(const ModelConfig& m, const Layout& l, int stage, double elem_bytes);

// ZeRO-3's gathered parameter copies beside the partition (parameters / dp): the segment in use and the
// next one prefetched, one layer at a time (a layer is released before the next is acquired; the pool
// reuses the embedding's buffer for layers): the largest segment (the token embedding, or a layer) and
// one more layer.
double zero3_parameter_gather_bytes(const ModelConfig& m, const Layout& l, double elem_bytes);
// A bf16 working copy's fp32 buffer of widened segments beside its patterns (model/bf16_working_copy.hpp):
// one layer at a time, or on the first stage the (learned) position embedding alone, whichever is larger;
// the token embedding and the LM head are read as bf16 patterns, never widened.
double widened_segment_bytes(const ModelConfig& m, const Layout& l, int stage);
// The rounded copies of one GEMM's operands that bf16 (or, on the CPU backend, TF32) GEMMs hold while they
// run: the largest backward of a layer's GEMMs, or of the LM head on the last stage (`head`), rounding dY,
// W and X. The CPU backend rounds fp32 copies into one workspace (a cluster without a bf16 peak, the cpu
// preset), dY and W a panel of output features at a time (rounded_gemm_panel); the CUDA backend makes
// whole bf16 copies, whose blocks its caching allocator keeps, except of what a bf16 run hands it as bf16
// patterns (a layer's kept activations without SP, a bf16 working copy's weights below ZeRO-3).
double gemm_operand_copy_bytes(const Config& cfg, const ClusterSpec& cluster, const Layout& l, bool head);

MemoryEstimate estimate_memory(const Config& cfg, const ClusterSpec& cluster, const Layout& l,
                               const Placement& placement);

}  // namespace trident::planner
