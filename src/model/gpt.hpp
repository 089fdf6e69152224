#pragma once
// GPT-2 forward and backward on one rank, on any compute backend (kernels/kernels.hpp).
//
// Per layer: x += attn(LN1(x)); x += mlp(LN2(x)). Final LN, logits = x W_te^T (tied) or x W_head^T,
// mean cross-entropy over all positions. Activation checkpointing (train.recompute):
//   none       every layer keeps all its activations;
//   selective  layers keep everything but the attention probabilities [B, NH, T, T], which are
//              recomputed from the stored qkv in backward (the "attention core");
//   full       only each layer's input is kept; the layer's forward is rerun before its backward.
// Kernels are deterministic, so the three modes give bit-identical losses and gradients.
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/group.hpp"
#include "deck/config.hpp"
#include "kernels.hpp"
#include "model/parameters.hpp"

namespace trident {

// Megatron-style tensor parallelism over a TP group: attention heads, the MLP inner dimension and
// the vocabulary are split among its ranks (column-parallel c_attn and c_fc, row-parallel c_proj,
// vocab-parallel embedding and LM head with a vocab-parallel cross-entropy that never gathers the
// logits). Without sequence parallelism, the per-layer communication is one all-reduce after each
// row-parallel GEMM in forward and one after each column-parallel GEMM's input gradient in backward.
// With it, LayerNorms and residuals work on this rank's 1/tp of the tokens; all-gathers before the
// column-parallel GEMMs (and again in backward, as Megatron does, instead of storing the gathered
// input) and reduce-scatters after the row-parallel ones replace the all-reduces.
struct TensorParallel {
  Group* group = nullptr;  // null: no tensor parallelism
  bool sequence_parallel = false;
  int size() const { return group ? group->size() : 1; }
  int rank() const { return group ? group->rank() : 0; }
};

// Bytes of activation memory held between forward and backward, and of the scratch buffers.
struct ActivationBytes {
  int64_t saved = 0;    // kept from forward for backward (the part recompute saves)
  int64_t scratch = 0;  // reused across layers (recompute buffers, gradient scratch, logits)
  int64_t total() const { return saved + scratch; }
};

class GptModel {
 public:
  // B: sequences per micro-batch. Parameters and gradients are allocated zeroed; with tp, this rank's
  // shard of them (layout().tp_rank()).
  GptModel(const GptShapes& shapes, Kernels& kernels, Recompute recompute, int64_t B, TensorParallel tp = {});
  ~GptModel();
  GptModel(const GptModel&) = delete;
  GptModel& operator=(const GptModel&) = delete;

  const ParameterLayout& layout() const { return layout_; }
  const GptShapes& shapes() const { return shapes_; }
  float* params() { return params_; }  // backend memory, layout().total() floats
  float* grads() { return grads_; }
  ActivationBytes activation_bytes() const { return act_bytes_; }

  // One micro-batch (B*T tokens, host arrays): forward, loss, backward. Gradients ACCUMULATE into
  // grads() with the loss of each position weighted by dloss_scale (1 / positions in the global
  // batch gives the mean over the global batch). Returns the sum of the per-position losses.
  double forward_backward(const int32_t* inputs, const int32_t* targets, float dloss_scale);

  // Forward and loss only (validation): the sum of per-position losses.
  double forward_loss(const int32_t* inputs, const int32_t* targets);

  // Call once after the last micro-batch of a step: with sequence parallelism, the replicated
  // parameters (LayerNorms, position embedding, row-parallel biases) saw only this rank's tokens,
  // so their gradients are summed over the TP group. Without it this does nothing.
  void finish_gradients();

  // A whole-model (tp = 1 layout) host copy of a parameter-shaped buffer of this model (params(),
  // grads(), or optimizer state), gathered over the TP group; the same on every TP rank.
  std::vector<float> gather_global(const float* buffer);
  const ParameterLayout& global_layout() const { return global_layout_; }

  // Global L2 norm of the gradients: sharded tensors summed over the TP group, replicated ones
  // counted once.
  double gradient_norm();

 private:
  struct LayerActs {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *att, *atty, *x2, *ln2, *ln2_mean, *ln2_rstd, *fch, *fchg;
  };
  float* take(int64_t n, bool saved);
  void upload_batch(const int32_t* inputs, const int32_t* targets);
  // Layer l's forward from residual[l] into residual[l+1], with activations in `a`.
  void layer_forward(int64_t l, const LayerActs& a);
  void layer_backward(int64_t l, const LayerActs& a);
  const LayerActs& acts_for(int64_t l) const;
  double forward_to_loss_and_dlogits(float dloss_scale);
  // The two TP communication primitives (identity when tp = 1):
  //   to_full:      this rank's [Nl, width] rows -> all N rows (all-gather with SP; else the same buffer)
  //   from_partial: a [N, width] partial sum on every rank -> this rank's reduced rows
  //                 (reduce-scatter into `local` with SP; else all-reduce in place, local == partial)
  const float* to_full(const float* local, int64_t width);
  void from_partial(float* partial, float* local, int64_t width);
  // Where a row-parallel GEMM writes its partial result destined for `local`.
  float* partial_for(float* local) { return sp_ ? partial_ : local; }
  // Positions of this rank's rows: the [B, T] token grid flattened, rows [row0, row0 + Nl).
  void add_positions(float* x);
  void position_grads(float* dwpe, const float* dx);

  GptShapes shapes_;
  Kernels& k_;
  Recompute recompute_;
  TensorParallel tp_;
  bool sp_ = false;
  int64_t B_, N_, Nl_, row0_;     // tokens in the micro-batch, rows on this rank, first row
  int64_t Cl_, Fl_, NHl_, Vl_;    // this rank's attention width, MLP width, heads, vocabulary rows
  int64_t vocab_begin_, vocab_real_;  // first vocabulary row here, and how many of them are real
  ParameterLayout layout_;
  ParameterLayout global_layout_;
  float* params_ = nullptr;
  float* grads_ = nullptr;
  std::vector<void*> owned_;
  ActivationBytes act_bytes_;

  int32_t *inputs_ = nullptr, *targets_ = nullptr;
  std::vector<float*> residual_;        // L+1 tensors [N, C]: input of each layer, then the last output
  std::vector<LayerActs> layer_acts_;   // L sets (none, selective) or 1 reused set (full)
  float* att_scratch_ = nullptr;        // selective: recomputed attention probabilities
  float* atty_scratch_ = nullptr;       // selective: attention output discarded on recompute
  float *lnf_, *lnf_mean_, *lnf_rstd_, *logits_, *losses_, *rowmax_, *sumexp_, *target_logit_;
  float *dres_, *dln_, *dqkv_, *dfch_, *dfchg_;
  float* gathered_ = nullptr;           // SP: [N, C] all-gathered input of a column-parallel GEMM
  float* partial_ = nullptr;            // SP: [N, C] partial output of a row-parallel GEMM / input grad
  std::vector<float> host_losses_;
};

}  // namespace trident
