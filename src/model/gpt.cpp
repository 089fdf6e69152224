#include "model/gpt.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace trident {

GptModel::GptModel(const GptShapes& s, Kernels& kernels, Recompute recompute, int64_t B, TensorParallel tp)
    : shapes_(s),
      k_(kernels),
      recompute_(recompute),
      tp_(tp),
      sp_(tp.sequence_parallel && tp.size() > 1),
      B_(B),
      N_(B * s.T),
      layout_(s, tp.rank(), tp.size()),
      global_layout_(s) {
  const int t = tp_.size();
  TRIDENT_CHECK(s.NH % t == 0 && s.F % t == 0 && s.Vp % t == 0,
                "heads {}, ffn_hidden {} and padded vocabulary {} must all be divisible by tp = {}", s.NH, s.F, s.Vp, t);
  TRIDENT_CHECK(!sp_ || N_ % t == 0, "sequence parallelism needs micro_batch*seq_len = {} divisible by tp = {}", N_, t);
  Nl_ = sp_ ? N_ / t : N_;
  row0_ = sp_ ? tp_.rank() * Nl_ : 0;
  NHl_ = s.NH / t;
  Cl_ = NHl_ * s.HD;
  Fl_ = s.F / t;
  Vl_ = s.Vp / t;
  vocab_begin_ = layout_.vocab_begin();
  vocab_real_ = std::clamp<int64_t>(s.V - vocab_begin_, 0, Vl_);

  const int64_t N = N_, Nl = Nl_, C = s.C;
  params_ = k_.alloc(layout_.total());
  grads_ = k_.alloc(layout_.total());
  owned_ = {params_, grads_};
  inputs_ = k_.alloc_int(N);
  targets_ = k_.alloc_int(N);
  owned_.push_back(inputs_);
  owned_.push_back(targets_);

  const int64_t att_size = B * NHl_ * s.T * s.T;
  for (int64_t l = 0; l <= s.L; ++l) residual_.push_back(take(Nl * C, true));
  // full recompute keeps one set of layer activations and reruns each layer's forward before its backward.
  const int64_t sets = recompute_ == Recompute::Full ? 1 : s.L;
  const bool saved = recompute_ != Recompute::Full;
  for (int64_t i = 0; i < sets; ++i) {
    LayerActs a{};
    a.ln1 = take(Nl * C, saved);
    a.ln1_mean = take(Nl, saved);
    a.ln1_rstd = take(Nl, saved);
    a.qkv = take(N * 3 * Cl_, saved);
    a.atty = take(N * Cl_, saved);
    a.x2 = take(Nl * C, saved);
    a.ln2 = take(Nl * C, saved);
    a.ln2_mean = take(Nl, saved);
    a.ln2_rstd = take(Nl, saved);
    a.fch = take(N * Fl_, saved);
    a.fchg = take(N * Fl_, saved);
    a.att = recompute_ == Recompute::None ? take(att_size, true) : nullptr;
    layer_acts_.push_back(a);
  }
  if (recompute_ != Recompute::None) {
    att_scratch_ = take(att_size, false);
    atty_scratch_ = take(N * Cl_, false);
    for (auto& a : layer_acts_) a.att = att_scratch_;
  }
  lnf_ = take(Nl * C, true);
  lnf_mean_ = take(Nl, true);
  lnf_rstd_ = take(Nl, true);
  logits_ = take(N * Vl_, false);
  losses_ = take(N, false);
  rowmax_ = take(N, false);
  sumexp_ = take(2 * N, false);  // sumexp and target logit side by side: one TP all-reduce for both
  target_logit_ = sumexp_ + N;
  dres_ = take(Nl * C, false);
  dln_ = take(N * C, false);
  dqkv_ = take(N * 3 * Cl_, false);
  dfch_ = take(N * Fl_, false);
  dfchg_ = take(N * Fl_, false);
  if (sp_) {
    gathered_ = take(N * C, false);
    partial_ = take(N * C, false);
  }
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

const float* GptModel::to_full(const float* local, int64_t width) {
  if (!sp_) return local;
  tp_.group->all_gather(local, gathered_, Nl_ * width);
  return gathered_;
}

void GptModel::from_partial(float* partial, float* local, int64_t width) {
  if (tp_.size() == 1) return;
  if (sp_) {
    tp_.group->reduce_scatter(partial, local, Nl_ * width);
  } else {
    tp_.group->all_reduce(partial, N_ * width);
  }
}

// Rows of this rank are a contiguous range of the flattened [B, T] grid; split it at sequence ends.
void GptModel::add_positions(float* x) {
  const int64_t T = shapes_.T, C = shapes_.C;
  for (int64_t r = row0_; r < row0_ + Nl_;) {
    const int64_t t = r % T, len = std::min(T - t, row0_ + Nl_ - r);
    k_.position_forward(x + (r - row0_) * C, params_ + layout_.wpe(), 1, len, C, t);
    r += len;
  }
}

void GptModel::position_grads(float* dwpe, const float* dx) {
  const int64_t T = shapes_.T, C = shapes_.C;
  for (int64_t r = row0_; r < row0_ + Nl_;) {
    const int64_t t = r % T, len = std::min(T - t, row0_ + Nl_ - r);
    k_.position_backward(dwpe, dx + (r - row0_) * C, 1, len, C, t);
    r += len;
  }
}

void GptModel::layer_forward(int64_t l, const LayerActs& a) {
  const auto& s = shapes_;
  const auto& p = layout_.layer(l);
  const float* W = params_;
  const int64_t N = N_, Nl = Nl_, C = s.C;
  const bool bias_here = tp_.rank() == 0;  // row-parallel biases enter the reduction once
  const float* x = residual_[l];
  k_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, W + p.ln1_w, W + p.ln1_b, Nl, C);
  k_.matmul_forward(a.qkv, to_full(a.ln1, C), W + p.qkv_w, W + p.qkv_b, N, C, 3 * Cl_);
  k_.attention_forward(a.atty, a.att, a.qkv, B_, s.T, NHl_, s.HD);
  k_.matmul_forward(partial_for(a.x2), a.atty, W + p.attn_proj_w, bias_here ? W + p.attn_proj_b : nullptr, N, Cl_, C);
  from_partial(partial_for(a.x2), a.x2, C);
  k_.accumulate(a.x2, x, Nl * C);  // x2 = x + attn
  k_.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.x2, W + p.ln2_w, W + p.ln2_b, Nl, C);
  k_.matmul_forward(a.fch, to_full(a.ln2, C), W + p.fc_w, W + p.fc_b, N, C, Fl_);
  k_.gelu_forward(a.fchg, a.fch, N * Fl_);
  float* out = residual_[l + 1];
  k_.matmul_forward(partial_for(out), a.fchg, W + p.fc_proj_w, bias_here ? W + p.fc_proj_b : nullptr, N, Fl_, C);
  from_partial(partial_for(out), out, C);
  k_.accumulate(out, a.x2, Nl * C);  // out = x2 + mlp
}

// On entry dres_ holds dL/d(output of layer l) for this rank's rows; on exit dL/d(input of layer l).
void GptModel::layer_backward(int64_t l, const LayerActs& a) {
  const auto& s = shapes_;
  const auto& p = layout_.layer(l);
  const float* W = params_;
  float* G = grads_;
  const int64_t N = N_, Nl = Nl_, C = s.C;
  float* dln_local = sp_ ? partial_ : dln_;  // input gradient of a column-parallel GEMM, reduced
  if (recompute_ == Recompute::Full) {
    layer_forward(l, a);
  } else if (recompute_ == Recompute::Selective) {
    k_.attention_forward(atty_scratch_, a.att, a.qkv, B_, s.T, NHl_, s.HD);
  }
  // MLP branch; the residual passes dres through unchanged and LN2's backward adds to it.
  k_.fill(dfchg_, 0.f, N * Fl_);
  k_.matmul_backward(dfchg_, G + p.fc_proj_w, G + p.fc_proj_b, to_full(dres_, C), a.fchg, W + p.fc_proj_w, N, Fl_, C);
  k_.fill(dfch_, 0.f, N * Fl_);
  k_.gelu_backward(dfch_, a.fch, dfchg_, N * Fl_);
  k_.fill(dln_, 0.f, N * C);
  k_.matmul_backward(dln_, G + p.fc_w, G + p.fc_b, dfch_, to_full(a.ln2, C), W + p.fc_w, N, C, Fl_);
  from_partial(dln_, dln_local, C);
  k_.layernorm_backward(dres_, G + p.ln2_w, G + p.ln2_b, dln_local, a.x2, W + p.ln2_w, a.ln2_mean, a.ln2_rstd, Nl, C);
  // Attention branch (dln_ first holds the gradient of the attention output, [N, Cl]).
  k_.fill(dln_, 0.f, N * Cl_);
  k_.matmul_backward(dln_, G + p.attn_proj_w, G + p.attn_proj_b, to_full(dres_, C), a.atty, W + p.attn_proj_w, N,
                     Cl_, C);
  k_.fill(dqkv_, 0.f, N * 3 * Cl_);
  k_.attention_backward(dqkv_, dln_, a.qkv, a.att, B_, s.T, NHl_, s.HD);
  k_.fill(dln_, 0.f, N * C);
  k_.matmul_backward(dln_, G + p.qkv_w, G + p.qkv_b, dqkv_, to_full(a.ln1, C), W + p.qkv_w, N, C, 3 * Cl_);
  from_partial(dln_, dln_local, C);
  k_.layernorm_backward(dres_, G + p.ln1_w, G + p.ln1_b, dln_local, residual_[l], W + p.ln1_w, a.ln1_mean, a.ln1_rstd,
                        Nl, C);
}

// Embedding, layers, final LN, logits and the vocab-parallel fused cross-entropy. Leaves
// dloss_scale * dL/dlogits in logits_ and returns the sum of the per-position losses.
double GptModel::forward_to_loss_and_dlogits(float dloss_scale) {
  const auto& s = shapes_;
  const float* W = params_;
  const int64_t N = N_, C = s.C;
  k_.embedding_forward(partial_for(residual_[0]), inputs_, W + layout_.wte(), vocab_begin_, Vl_, N, C);
  from_partial(partial_for(residual_[0]), residual_[0], C);
  add_positions(residual_[0]);
  for (int64_t l = 0; l < s.L; ++l) layer_forward(l, acts_for(l));
  k_.layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, residual_[s.L], W + layout_.lnf_w(), W + layout_.lnf_b(), Nl_, C);
  k_.matmul_forward(logits_, to_full(lnf_, C), W + layout_.lm_head(), nullptr, N, C, Vl_);
  // Max, sum of exponentials and target logit are reduced over the vocabulary shards; the logits never are.
  k_.xent_row_max(rowmax_, logits_, N, Vl_, vocab_real_);
  if (tp_.size() > 1) tp_.group->all_reduce(rowmax_, N, ReduceOp::Max);
  k_.xent_sumexp_target(sumexp_, target_logit_, logits_, rowmax_, targets_, vocab_begin_, N, Vl_, vocab_real_);
  if (tp_.size() > 1) tp_.group->all_reduce(sumexp_, 2 * N);
  k_.xent_loss_grad(losses_, logits_, rowmax_, sumexp_, target_logit_, targets_, vocab_begin_, dloss_scale, N, Vl_,
                    vocab_real_);
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
  // LM head and final LayerNorm. In SP the gathered final-LN output is still in gathered_.
  const float* lnf_full = sp_ ? gathered_ : lnf_;
  float* dln_local = sp_ ? partial_ : dln_;
  k_.fill(dln_, 0.f, N * C);
  k_.matmul_backward(dln_, G + layout_.lm_head(), nullptr, logits_, lnf_full, W + layout_.lm_head(), N, C, Vl_);
  from_partial(dln_, dln_local, C);
  k_.fill(dres_, 0.f, Nl_ * C);
  k_.layernorm_backward(dres_, G + layout_.lnf_w(), G + layout_.lnf_b(), dln_local, residual_[s.L],
                        W + layout_.lnf_w(), lnf_mean_, lnf_rstd_, Nl_, C);
  for (int64_t l = s.L - 1; l >= 0; --l) layer_backward(l, acts_for(l));
  k_.embedding_backward(G + layout_.wte(), to_full(dres_, C), inputs_, vocab_begin_, Vl_, N, C);
  position_grads(G + layout_.wpe(), dres_);
  return loss_sum;
}

double GptModel::forward_loss(const int32_t* inputs, const int32_t* targets) {
  upload_batch(inputs, targets);
  return forward_to_loss_and_dlogits(0.f);
}

void GptModel::finish_gradients() {
  if (!sp_) return;
  // LayerNorms and the position embedding saw only this rank's tokens. The row-parallel biases did
  // not: their gradient comes from the all-gathered output gradient, already whole on every rank.
  for (const auto& t : layout_.tensors())
    if (t.split == TpSplit::None && t.kind != ParamKind::Bias) tp_.group->all_reduce(grads_ + t.offset, t.numel);
}

std::vector<float> GptModel::gather_global(const float* buffer) {
  const int t = tp_.size();
  std::vector<float> local(layout_.total());
  k_.copy_to_host(local.data(), buffer, layout_.total());
  if (t == 1) return local;
  std::vector<float> global(global_layout_.total(), 0.f);
  std::vector<float> all(local.size() * t);
  tp_.group->all_gather(local.data(), all.data(), int64_t(local.size()));
  for (int r = 0; r < t; ++r) {
    const ParameterLayout shard(shapes_, r, t);
    unshard_parameters(shard, all.data() + r * local.size(), global_layout_, global.data());
  }
  return global;
}

double GptModel::gradient_norm() {
  double sharded = 0, replicated = 0;
  for (const auto& t : layout_.tensors())
    (t.split == TpSplit::None ? replicated : sharded) += k_.sum_squares(grads_ + t.offset, t.numel);
  if (tp_.size() > 1) tp_.group->all_reduce(&sharded, 1);
  return std::sqrt(sharded + replicated);
}

}  // namespace trident
