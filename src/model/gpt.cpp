#include "model/gpt.hpp"

#include "core/error.hpp"

namespace trident {

GptModel::GptModel(const GptShapes& s, Kernels& kernels, Recompute recompute, int64_t B)
    : shapes_(s), k_(kernels), recompute_(recompute), B_(B), N_(B * s.T), layout_(s) {
  const int64_t N = N_, C = s.C, F = s.F;
  params_ = k_.alloc(layout_.total());
  grads_ = k_.alloc(layout_.total());
  owned_ = {params_, grads_};
  inputs_ = k_.alloc_int(N);
  targets_ = k_.alloc_int(N);
  owned_.push_back(inputs_);
  owned_.push_back(targets_);

  const int64_t att_size = B * s.NH * s.T * s.T;
  for (int64_t l = 0; l <= s.L; ++l) residual_.push_back(take(N * C, true));
  // full recompute keeps one set of layer activations and reruns each layer's forward before its backward.
  const int64_t sets = recompute_ == Recompute::Full ? 1 : s.L;
  const bool saved = recompute_ != Recompute::Full;
  for (int64_t i = 0; i < sets; ++i) {
    LayerActs a{};
    a.ln1 = take(N * C, saved);
    a.ln1_mean = take(N, saved);
    a.ln1_rstd = take(N, saved);
    a.qkv = take(N * 3 * C, saved);
    a.atty = take(N * C, saved);
    a.x2 = take(N * C, saved);
    a.ln2 = take(N * C, saved);
    a.ln2_mean = take(N, saved);
    a.ln2_rstd = take(N, saved);
    a.fch = take(N * F, saved);
    a.fchg = take(N * F, saved);
    a.att = recompute_ == Recompute::None ? take(att_size, true) : nullptr;
    layer_acts_.push_back(a);
  }
  if (recompute_ != Recompute::None) {
    att_scratch_ = take(att_size, false);
    atty_scratch_ = take(N * C, false);
    for (auto& a : layer_acts_) a.att = att_scratch_;
  }
  lnf_ = take(N * C, true);
  lnf_mean_ = take(N, true);
  lnf_rstd_ = take(N, true);
  logits_ = take(N * s.Vp, false);
  losses_ = take(N, false);
  rowmax_ = take(N, false);
  sumexp_ = take(N, false);
  target_logit_ = take(N, false);
  dres_ = take(N * C, false);
  dln_ = take(N * C, false);
  dqkv_ = take(N * 3 * C, false);
  dfch_ = take(N * F, false);
  dfchg_ = take(N * F, false);
  host_losses_.resize(N);
}

GptModel::~GptModel() {
  for (void* p : owned_) k_.free(p);
}

float* GptModel::take(int64_t n, bool saved) {
  float* p = k_.alloc(n);
  owned_.push_back(p);
  (saved ? act_bytes_.saved : act_bytes_.scratch) += n * int64_t(sizeof(float));
  return p;
}

const GptModel::LayerActs& GptModel::acts_for(int64_t l) const {
  return layer_acts_[recompute_ == Recompute::Full ? 0 : l];
}

void GptModel::upload_batch(const int32_t* inputs, const int32_t* targets) {
  k_.copy_to_device_int(inputs_, inputs, N_);
  k_.copy_to_device_int(targets_, targets, N_);
}

void GptModel::layer_forward(int64_t l, const LayerActs& a) {
  const auto& s = shapes_;
  const auto& p = layout_.layer(l);
  const float* W = params_;
  const int64_t N = N_, C = s.C, F = s.F;
  const float* x = residual_[l];
  k_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, W + p.ln1_w, W + p.ln1_b, N, C);
  k_.matmul_forward(a.qkv, a.ln1, W + p.qkv_w, W + p.qkv_b, N, C, 3 * C);
  k_.attention_forward(a.atty, a.att, a.qkv, B_, s.T, s.NH, s.HD);
  k_.matmul_forward(a.x2, a.atty, W + p.attn_proj_w, W + p.attn_proj_b, N, C, C);
  k_.accumulate(a.x2, x, N * C);  // x2 = x + attn
  k_.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.x2, W + p.ln2_w, W + p.ln2_b, N, C);
  k_.matmul_forward(a.fch, a.ln2, W + p.fc_w, W + p.fc_b, N, C, F);
  k_.gelu_forward(a.fchg, a.fch, N * F);
  float* out = residual_[l + 1];
  k_.matmul_forward(out, a.fchg, W + p.fc_proj_w, W + p.fc_proj_b, N, F, C);
  k_.accumulate(out, a.x2, N * C);  // out = x2 + mlp
}

// On entry dres_ holds dL/d(output of layer l); on exit dL/d(input of layer l).
void GptModel::layer_backward(int64_t l, const LayerActs& a) {
  const auto& s = shapes_;
  const auto& p = layout_.layer(l);
  const float* W = params_;
  float* G = grads_;
  const int64_t N = N_, C = s.C, F = s.F;
  if (recompute_ == Recompute::Full) {
    layer_forward(l, a);
  } else if (recompute_ == Recompute::Selective) {
    k_.attention_forward(atty_scratch_, a.att, a.qkv, B_, s.T, s.NH, s.HD);
  }
  // MLP branch; the residual passes dres through unchanged and LN2's backward adds to it.
  k_.fill(dfchg_, 0.f, N * F);
  k_.matmul_backward(dfchg_, G + p.fc_proj_w, G + p.fc_proj_b, dres_, a.fchg, W + p.fc_proj_w, N, F, C);
  k_.fill(dfch_, 0.f, N * F);
  k_.gelu_backward(dfch_, a.fch, dfchg_, N * F);
  k_.fill(dln_, 0.f, N * C);
  k_.matmul_backward(dln_, G + p.fc_w, G + p.fc_b, dfch_, a.ln2, W + p.fc_w, N, C, F);
  k_.layernorm_backward(dres_, G + p.ln2_w, G + p.ln2_b, dln_, a.x2, W + p.ln2_w, a.ln2_mean, a.ln2_rstd, N, C);
  // Attention branch.
  k_.fill(dln_, 0.f, N * C);
  k_.matmul_backward(dln_, G + p.attn_proj_w, G + p.attn_proj_b, dres_, a.atty, W + p.attn_proj_w, N, C, C);
  k_.fill(dqkv_, 0.f, N * 3 * C);
  k_.attention_backward(dqkv_, dln_, a.qkv, a.att, B_, s.T, s.NH, s.HD);
  k_.fill(dln_, 0.f, N * C);
  k_.matmul_backward(dln_, G + p.qkv_w, G + p.qkv_b, dqkv_, a.ln1, W + p.qkv_w, N, C, 3 * C);
  k_.layernorm_backward(dres_, G + p.ln1_w, G + p.ln1_b, dln_, residual_[l], W + p.ln1_w, a.ln1_mean, a.ln1_rstd,
                        N, C);
}

// Embedding, layers, final LN, logits and the fused cross-entropy. Leaves dloss_scale * dL/dlogits
// in logits_ and returns the sum of the per-position losses.
double GptModel::forward_to_loss_and_dlogits(float dloss_scale) {
  const auto& s = shapes_;
  const float* W = params_;
  const int64_t N = N_, C = s.C;
  k_.embedding_forward(residual_[0], inputs_, W + layout_.wte(), 0, s.Vp, N, C);
  k_.position_forward(residual_[0], W + layout_.wpe(), B_, s.T, C, 0);
  for (int64_t l = 0; l < s.L; ++l) layer_forward(l, acts_for(l));
  k_.layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, residual_[s.L], W + layout_.lnf_w(), W + layout_.lnf_b(), N, C);
  k_.matmul_forward(logits_, lnf_, W + layout_.lm_head(), nullptr, N, C, s.Vp);
  k_.xent_row_max(rowmax_, logits_, N, s.Vp, s.V);
  k_.xent_sumexp_target(sumexp_, target_logit_, logits_, rowmax_, targets_, 0, N, s.Vp, s.V);
  k_.xent_loss_grad(losses_, logits_, rowmax_, sumexp_, target_logit_, targets_, 0, dloss_scale, N, s.Vp, s.V);
  k_.copy_to_host(host_losses_.data(), losses_, N);
  double sum = 0;
  for (float v : host_losses_) sum += v;
  return sum;
}

double GptModel::forward_backward(const int32_t* inputs, const int32_t* targets, float dloss_scale) {
  const auto& s = shapes_;
  const float* W = params_;
  float* G = grads_;
  const int64_t N = N_, C = s.C;
  upload_batch(inputs, targets);
  const double loss_sum = forward_to_loss_and_dlogits(dloss_scale);
  // LM head and final LayerNorm.
  k_.fill(dln_, 0.f, N * C);
  k_.matmul_backward(dln_, G + layout_.lm_head(), nullptr, logits_, lnf_, W + layout_.lm_head(), N, C, s.Vp);
  k_.fill(dres_, 0.f, N * C);
  k_.layernorm_backward(dres_, G + layout_.lnf_w(), G + layout_.lnf_b(), dln_, residual_[s.L], W + layout_.lnf_w(),
                        lnf_mean_, lnf_rstd_, N, C);
  for (int64_t l = s.L - 1; l >= 0; --l) layer_backward(l, acts_for(l));
  k_.embedding_backward(G + layout_.wte(), dres_, inputs_, 0, s.Vp, N, C);
  k_.position_backward(G + layout_.wpe(), dres_, B_, s.T, C, 0);
  return loss_sum;
}

double GptModel::forward_loss(const int32_t* inputs, const int32_t* targets) {
  upload_batch(inputs, targets);
  return forward_to_loss_and_dlogits(0.f);
}

}  // namespace trident
