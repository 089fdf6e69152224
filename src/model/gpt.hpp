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

#include "deck/config.hpp"
#include "kernels.hpp"
#include "model/parameters.hpp"

namespace trident {

// Bytes of activation memory held between forward and backward, and of the scratch buffers.
struct ActivationBytes {
  int64_t saved = 0;    // kept from forward for backward (the part recompute saves)
  int64_t scratch = 0;  // reused across layers (recompute buffers, gradient scratch, logits)
  int64_t total() const { return saved + scratch; }
};

class GptModel {
 public:
  // B: sequences per micro-batch. Parameters and gradients are allocated zeroed.
  GptModel(const GptShapes& shapes, Kernels& kernels, Recompute recompute, int64_t B);
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

  GptShapes shapes_;
  Kernels& k_;
  Recompute recompute_;
  int64_t B_, N_;
  ParameterLayout layout_;
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
  std::vector<float> host_losses_;
};

}  // namespace trident
