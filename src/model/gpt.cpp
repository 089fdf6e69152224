#include "model/gpt.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace trident {

GptModel::GptModel(const GptShapes& s, Kernels& kernels, Recompute recompute, int64_t B, TensorParallel tp,
                   ChunkSpec chunk, WholeBuffers whole)
    : shapes_(s),
      k_(kernels),
      recompute_(recompute),
      tp_(tp),
      sp_(tp.sequence_parallel && tp.size() > 1),
      B_(B),
      N_(B * s.T),
      layout_(s, tp.rank(), tp.size(), chunk),
      global_layout_(s, 0, 1, chunk) {
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
  L0_ = layout_.layer_begin();
  nl_ = layout_.layer_end() - L0_;

  const int64_t N = N_, Nl = Nl_, C = s.C;
  loss_sum_ = k_.alloc_double(1);
  norm_sums_ = k_.alloc_double(2);
  owned_ = {loss_sum_, norm_sums_};
  if (whole.parameters) owned_.push_back(params_ = k_.alloc(layout_.total()));
  if (whole.gradients) owned_.push_back(grads_ = k_.alloc(layout_.total()));
  if (recompute_ != Recompute::None) {
    lse_scratch_ = take(B * NHl_ * s.T, false, &owned_);
    atty_scratch_ = take(N * Cl_, false, &owned_);
  }
  if (recompute_ == Recompute::Full) full_acts_ = make_layer_acts(false, &owned_);
  if (layout_.has_head()) {
    targets_ = k_.alloc_int(N);
    owned_.push_back(targets_);
    lnf_ = take(Nl * C, false, &owned_);
    lnf_mean_ = take(Nl, false, &owned_);
    lnf_rstd_ = take(Nl, false, &owned_);
    logits_ = take(N * Vl_, false, &owned_);
    losses_ = take(N, false, &owned_);
    rowmax_ = take(N, false, &owned_);
    sumexp_ = take(2 * N, false, &owned_);  // sumexp and target logit side by side: one TP all-reduce
    target_logit_ = sumexp_ + N;
  }
  dres_ = take(Nl * C, false, &owned_);
  dln_ = take(N * C, false, &owned_);
  dqkv_ = take(N * 3 * Cl_, false, &owned_);
  dfch_ = take(N * Fl_, false, &owned_);
  dfchg_ = take(N * Fl_, false, &owned_);
  if (sp_) {
    gathered_ = take(N * C, false, &owned_);
    partial_ = take(N * C, false, &owned_);
  }
}

GptModel::~GptModel() {
  for (auto& slot : slots_)
    for (void* p : slot->owned) k_.free(p);
  for (void* p : owned_) k_.free(p);
}

// Scratch (`saved` false) is counted in act_bytes_.scratch; slot memory is counted per slot.
float* GptModel::take(int64_t n, bool saved, std::vector<void*>* owner) {
  float* p = k_.alloc(n);
  owner->push_back(p);
  (saved ? slot_bytes_ : act_bytes_.scratch) += n * int64_t(sizeof(float));
  return p;
}

GptModel::LayerActs GptModel::make_layer_acts(bool saved, std::vector<void*>* owner) {
  const int64_t N = N_, Nl = Nl_, C = shapes_.C;
  LayerActs a{};
  a.ln1 = take(Nl * C, saved, owner);
  a.ln1_mean = take(Nl, saved, owner);
  a.ln1_rstd = take(Nl, saved, owner);
  a.qkv = take(N * 3 * Cl_, saved, owner);
  a.atty = take(N * Cl_, saved, owner);
  a.x2 = take(Nl * C, saved, owner);
  a.ln2 = take(Nl * C, saved, owner);
  a.ln2_mean = take(Nl, saved, owner);
  a.ln2_rstd = take(Nl, saved, owner);
  a.fch = take(N * Fl_, saved, owner);
  a.fchg = take(N * Fl_, saved, owner);
  a.lse = recompute_ == Recompute::None ? take(B_ * NHl_ * shapes_.T, saved, owner) : lse_scratch_;
  return a;
}

// Slots are made on first need and reused afterwards.
int GptModel::acquire_slot() {
  int index = -1;
  for (size_t i = 0; i < slots_.size() && index < 0; ++i)
    if (!slots_[i]->busy) index = int(i);
  if (index < 0) {
    auto slot = std::make_unique<Slot>();
    slot_bytes_ = 0;
    if (layout_.has_embedding()) {
      slot->tokens = k_.alloc_int(N_);
      slot->owned.push_back(slot->tokens);
      slot_bytes_ += N_ * int64_t(sizeof(int32_t));
    }
    for (int64_t i = 0; i <= nl_; ++i) slot->residual.push_back(take(Nl_ * shapes_.C, true, &slot->owned));
    if (recompute_ != Recompute::Full)
      for (int64_t i = 0; i < nl_; ++i) slot->acts.push_back(make_layer_acts(true, &slot->owned));
    if (layout_.has_head()) slot->dtop = take(Nl_ * shapes_.C, true, &slot->owned);
    act_bytes_.saved = slot_bytes_;
    slots_.push_back(std::move(slot));
    index = int(slots_.size()) - 1;
  }
  slots_[index]->busy = true;
  int64_t busy = 0;
  for (const auto& sl : slots_) busy += sl->busy;
  act_bytes_.peak_slots = std::max(act_bytes_.peak_slots, busy);
  return index;
}

void GptModel::free_slot(Slot& s) { s.busy = false; }

void GptModel::release(int slot) { free_slot(*slots_.at(slot)); }

const GptModel::LayerActs& GptModel::acts_for(const Slot& s, int64_t l) const {
  return recompute_ == Recompute::Full ? full_acts_ : s.acts[l - L0_];
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
    k_.position_forward(x + (r - row0_) * C, param(layout_.wpe()), 1, len, C, t);
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

void GptModel::layer_forward(Slot& sl, int64_t l, const LayerActs& a) {
  const auto& s = shapes_;
  const auto& p = layout_.layer(l);
  const int64_t N = N_, Nl = Nl_, C = s.C;
  const bool bias_here = tp_.rank() == 0;  // row-parallel biases enter the reduction once
  const float* x = sl.residual[l - L0_];
  acquire_params(layer_range(l));
  k_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, param(p.ln1_w), param(p.ln1_b), Nl, C, 1e-5f);
  k_.matmul_forward(a.qkv, to_full(a.ln1, C), param(p.qkv_w), param(p.qkv_b), N, C, 3 * Cl_);
  k_.attention_forward(a.atty, a.lse, a.qkv, B_, s.T, NHl_, NHl_, s.HD);
  k_.matmul_forward(partial_for(a.x2), a.atty, param(p.attn_proj_w), bias_here ? param(p.attn_proj_b) : nullptr, N, Cl_, C);
  from_partial(partial_for(a.x2), a.x2, C);
  k_.accumulate(a.x2, x, Nl * C);  // x2 = x + attn
  k_.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.x2, param(p.ln2_w), param(p.ln2_b), Nl, C, 1e-5f);
  k_.matmul_forward(a.fch, to_full(a.ln2, C), param(p.fc_w), param(p.fc_b), N, C, Fl_);
  k_.gelu_forward(a.fchg, a.fch, N * Fl_);
  float* out = sl.residual[l - L0_ + 1];
  k_.matmul_forward(partial_for(out), a.fchg, param(p.fc_proj_w), bias_here ? param(p.fc_proj_b) : nullptr, N, Fl_, C);
  from_partial(partial_for(out), out, C);
  k_.accumulate(out, a.x2, Nl * C);  // out = x2 + mlp
  release_params(layer_range(l));
}

// On entry dres_ holds dL/d(output of layer l) for this rank's rows; on exit dL/d(input of layer l).
void GptModel::layer_backward(Slot& sl, int64_t l, const LayerActs& a) {
  const auto& s = shapes_;
  const auto& p = layout_.layer(l);
  const int64_t N = N_, Nl = Nl_, C = s.C;
  float* dln_local = sp_ ? partial_ : dln_;  // input gradient of a column-parallel GEMM, reduced
  acquire_params(layer_range(l));
  if (l > L0_) prefetch_params(layer_range(l - 1));
  if (recompute_ == Recompute::Full) {
    layer_forward(sl, l, a);
  } else if (recompute_ == Recompute::Selective) {
    k_.attention_forward(atty_scratch_, a.lse, a.qkv, B_, s.T, NHl_, NHl_, s.HD);  // same bits as a.atty
  }
  open_grads(layer_range(l).first, layer_range(l).second);
  // MLP branch; the residual passes dres through unchanged and LN2's backward adds to it.
  k_.fill(dfchg_, 0.f, N * Fl_);
  k_.matmul_backward(dfchg_, grad(p.fc_proj_w), grad(p.fc_proj_b), to_full(dres_, C), a.fchg, param(p.fc_proj_w), N, Fl_, C);
  k_.fill(dfch_, 0.f, N * Fl_);
  k_.gelu_backward(dfch_, a.fch, dfchg_, N * Fl_);
  k_.fill(dln_, 0.f, N * C);
  k_.matmul_backward(dln_, grad(p.fc_w), grad(p.fc_b), dfch_, to_full(a.ln2, C), param(p.fc_w), N, C, Fl_);
  from_partial(dln_, dln_local, C);
  k_.layernorm_backward(dres_, grad(p.ln2_w), grad(p.ln2_b), dln_local, a.x2, param(p.ln2_w), a.ln2_mean, a.ln2_rstd, Nl, C);
  // Attention branch (dln_ first holds the gradient of the attention output, [N, Cl]).
  k_.fill(dln_, 0.f, N * Cl_);
  k_.matmul_backward(dln_, grad(p.attn_proj_w), grad(p.attn_proj_b), to_full(dres_, C), a.atty, param(p.attn_proj_w), N,
                     Cl_, C);
  k_.fill(dqkv_, 0.f, N * 3 * Cl_);
  k_.attention_backward(dqkv_, dln_, a.qkv, a.atty, a.lse, B_, s.T, NHl_, NHl_, s.HD);
  k_.fill(dln_, 0.f, N * C);
  k_.matmul_backward(dln_, grad(p.qkv_w), grad(p.qkv_b), dqkv_, to_full(a.ln1, C), param(p.qkv_w), N, C, 3 * Cl_);
  from_partial(dln_, dln_local, C);
  k_.layernorm_backward(dres_, grad(p.ln1_w), grad(p.ln1_b), dln_local, sl.residual[l - L0_], param(p.ln1_w), a.ln1_mean,
                        a.ln1_rstd, Nl, C);
  close_grads();
  release_params(layer_range(l));
}

// Final LN, logits and the vocab-parallel fused cross-entropy; with_grad: the head's backward
// (LM head, final LN) into s.dtop. The per-position losses are summed onto loss_sum_.
void GptModel::head_forward(Slot& sl, const int32_t* targets, float dloss_scale, bool with_grad) {
  const auto& s = shapes_;
  const int64_t N = N_, Nl = Nl_, C = s.C;
  const float* top = sl.residual[nl_];
  const std::pair<int64_t, int64_t> tail{layout_.lnf_w(), layout_.total()};  // ln_f and an untied lm_head
  const std::pair<int64_t, int64_t> wte{layout_.wte(), layout_.wte() + Vl_ * C};
  acquire_params(tail);
  if (shapes_.tied) acquire_params(wte);
  k_.copy_to_device_int(targets_, targets, N);
  k_.layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, top, param(layout_.lnf_w()), param(layout_.lnf_b()), Nl, C, 1e-5f);
  const float* lnf_full = to_full(lnf_, C);
  k_.matmul_forward(logits_, lnf_full, param(layout_.lm_head()), nullptr, N, C, Vl_);
  // Max, sum of exponentials and target logit are reduced over the vocabulary shards; the logits never are.
  k_.xent_row_max(rowmax_, logits_, N, Vl_, vocab_real_);
  if (tp_.size() > 1) tp_.group->all_reduce(rowmax_, N, ReduceOp::Max);
  k_.xent_sumexp_target(sumexp_, target_logit_, logits_, rowmax_, targets_, vocab_begin_, N, Vl_, vocab_real_);
  if (tp_.size() > 1) tp_.group->all_reduce(sumexp_, 2 * N);
  k_.xent_loss_grad(losses_, logits_, rowmax_, sumexp_, target_logit_, targets_, vocab_begin_, dloss_scale, N, Vl_,
                    vocab_real_);
  k_.sum_into(loss_sum_, losses_, N);
  if (with_grad) head_backward(sl, lnf_full);
  release_params(tail);
  if (shapes_.tied) release_params(wte);
}

// The head's backward (LM head, final LN) into s.dtop; logits_ holds dloss_scale * dL/dlogits.
void GptModel::head_backward(Slot& sl, const float* lnf_full) {
  const int64_t N = N_, Nl = Nl_, C = shapes_.C;
  const float* top = sl.residual[nl_];
  // logits_ now holds dloss_scale * dL/dlogits; lnf_full is still intact (nothing gathered since).
  float* dln_local = sp_ ? partial_ : dln_;
  open_grads(layout_.lnf_w(), layout_.total());  // ln_f and an untied lm_head
  if (shapes_.tied) open_grads(layout_.wte(), layout_.wte() + Vl_ * C);
  k_.fill(dln_, 0.f, N * C);
  k_.matmul_backward(dln_, grad(layout_.lm_head()), nullptr, logits_, lnf_full, param(layout_.lm_head()), N, C, Vl_);
  from_partial(dln_, dln_local, C);
  k_.fill(sl.dtop, 0.f, Nl * C);
  k_.layernorm_backward(sl.dtop, grad(layout_.lnf_w()), grad(layout_.lnf_b()), dln_local, top, param(layout_.lnf_w()),
                        lnf_mean_, lnf_rstd_, Nl, C);
  close_grads();
}

int GptModel::forward(const int32_t* tokens, const float* input, const int32_t* targets, float dloss_scale,
                      bool with_grad) {
  const int index = acquire_slot();
  Slot& sl = *slots_[index];
  const int64_t N = N_, C = shapes_.C;
  if (layout_.has_embedding()) {
    k_.copy_to_device_int(sl.tokens, tokens, N);
    float* x0 = sl.residual[0];
    const std::pair<int64_t, int64_t> wte{layout_.wte(), layout_.wte() + Vl_ * C}, wpe{layout_.wpe(), layout_.wpe() + shapes_.T * C};
    acquire_params(wte);
    acquire_params(wpe);
    if (nl_ > 0) prefetch_params(layer_range(L0_));
    k_.embedding_forward(partial_for(x0), sl.tokens, param(layout_.wte()), vocab_begin_, Vl_, N, C);
    from_partial(partial_for(x0), x0, C);
    add_positions(x0);
    release_params(wte);
    release_params(wpe);
  } else {
    k_.copy(sl.residual[0], input, Nl_ * C);
  }
  for (int64_t l = L0_; l < L0_ + nl_; ++l) {
    // (Prefetched here, not in layer_forward, which full recompute also runs inside backward.)
    if (l + 1 < L0_ + nl_) {
      prefetch_params(layer_range(l + 1));
    } else if (layout_.has_head()) {
      prefetch_params({layout_.lnf_w(), layout_.total()});
    }
    layer_forward(sl, l, acts_for(sl, l));
  }
  if (layout_.has_head()) {
    if (with_grad && hooks_.writing) {
      hooks_.writing(layout_.lnf_w(), layout_.total());
      if (shapes_.tied) hooks_.writing(layout_.wte(), layout_.wte() + Vl_ * shapes_.C);  // the LM head is wte
    }
    head_forward(sl, targets, dloss_scale, with_grad);
    if (with_grad && hooks_.final_from) hooks_.final_from(layout_.lnf_w());
  }
  return index;
}

const float* GptModel::output(int slot) const { return slots_.at(slot)->residual[nl_]; }

const float* GptModel::backward(int slot, const float* dout) {
  Slot& sl = *slots_.at(slot);
  const int64_t Nl = Nl_, C = shapes_.C;
  if (hooks_.writing) hooks_.writing(0, layout_.has_head() ? layout_.lnf_w() : layout_.total());
  k_.copy(dres_, layout_.has_head() ? sl.dtop : dout, Nl * C);
  for (int64_t l = L0_ + nl_ - 1; l >= L0_; --l) {
    layer_backward(sl, l, acts_for(sl, l));
    // (A chunk that starts with a layer reports its end only once, below: from == 0 ends the backward.)
    if (hooks_.final_from && layout_.layer(l).ln1_w > 0) hooks_.final_from(layout_.layer(l).ln1_w);
  }
  free_slot(sl);
  if (layout_.has_embedding()) {
    open_grads(layout_.wte(), layout_.wte() + Vl_ * C);
    open_grads(layout_.wpe(), layout_.wpe() + shapes_.T * C);
    k_.embedding_backward(grad(layout_.wte()), to_full(dres_, C), sl.tokens, vocab_begin_, Vl_, N_, C);
    position_grads(grad(layout_.wpe()), dres_);
    close_grads();
  }
  if (hooks_.final_from) hooks_.final_from(0);
  return layout_.has_embedding() ? nullptr : dres_;
}

double GptModel::forward_backward(const int32_t* inputs, const int32_t* targets, float dloss_scale) {
  TRIDENT_CHECK(layout_.has_embedding() && layout_.has_head(), "forward_backward needs the whole model in one chunk");
  const int slot = forward(inputs, nullptr, targets, dloss_scale, true);
  backward(slot, nullptr);
  return take_loss_sum();
}

double GptModel::forward_loss(const int32_t* inputs, const int32_t* targets) {
  TRIDENT_CHECK(layout_.has_embedding() && layout_.has_head(), "forward_loss needs the whole model in one chunk");
  release(forward(inputs, nullptr, targets, 0.f, false));
  return take_loss_sum();
}

double GptModel::take_loss_sum() {
  double sum = 0;
  k_.copy_to_host_double(&sum, loss_sum_, 1);
  k_.fill_double(loss_sum_, 0.0, 1);
  return sum;
}

void GptModel::finish_gradients() { finish_gradients(grads_, 0, layout_.total()); }

void GptModel::finish_gradients(float* range_grads, int64_t begin, int64_t end) {
  if (!sp_) return;
  // LayerNorms and the position embedding saw only this rank's tokens. The row-parallel biases did
  // not: their gradient comes from the all-gathered output gradient, already whole on every rank.
  for (const auto& t : layout_.tensors()) {
    const int64_t first = std::max(begin, t.offset), last = std::min(end, t.offset + t.numel);
    if (t.split == TpSplit::None && t.kind != ParamKind::Bias && first < last)
      tp_.group->all_reduce(range_grads + (first - begin), last - first);
  }
}

std::vector<float> GptModel::gather_global(const float* buffer) {
  const int t = tp_.size();
  std::vector<float> local(layout_.total());
  k_.copy_to_host(local.data(), buffer, layout_.total());
  if (t == 1) return local;
  std::vector<float> global(global_layout_.total(), 0.f);
  std::vector<float> all(local.size() * t);
  tp_.group->all_gather_host(local.data(), all.data(), int64_t(local.size()));
  for (int r = 0; r < t; ++r) {
    const ParameterLayout shard(shapes_, r, t, layout_.chunk());
    unshard_parameters(shard, all.data() + r * local.size(), global_layout_, global.data());
  }
  return global;
}

void GptModel::add_gradient_square_sums(double* sums, bool skip_wte, const float* range_grads, int64_t begin,
                                        int64_t end) {
  for (const auto& t : layout_.tensors()) {
    if (skip_wte && t.offset == layout_.wte()) continue;
    const int64_t first = std::max(begin, t.offset), last = std::min(end, t.offset + t.numel);
    if (first < last)
      k_.sum_squares_into(sums + (t.split == TpSplit::None ? 1 : 0), range_grads + (first - begin), last - first);
  }
}

void GptModel::set_gradient_sink(GradientSink* sink) {
  TRIDENT_CHECK(sink && open_.empty(), "internal: set_gradient_sink needs a sink and no open segment");
  sink_ = sink;
  if (!grads_) return;
  owned_.erase(std::find(owned_.begin(), owned_.end(), static_cast<void*>(grads_)));
  k_.free(grads_);
  grads_ = nullptr;
}

std::pair<int64_t, int64_t> GptModel::layer_range(int64_t l) const {
  // A layer's tensors are contiguous, from ln_1.weight to mlp.c_proj.bias ([C], replicated).
  return {layout_.layer(l).ln1_w, layout_.layer(l).fc_proj_b + shapes_.C};
}

void GptModel::set_parameter_source(ParameterSource* source) {
  TRIDENT_CHECK(source && held_.empty(), "internal: set_parameter_source needs a source and no held segment");
  source_ = source;
  if (!params_) return;
  owned_.erase(std::find(owned_.begin(), owned_.end(), static_cast<void*>(params_)));
  k_.free(params_);
  params_ = nullptr;
}

const float* GptModel::param(int64_t offset) const {
  if (!source_) return params_ + offset;
  for (const auto& h : held_)
    if (h.begin <= offset && offset < h.end) return h.data + (offset - h.begin);
  throw Error(fmt::format("internal: parameter element {} read outside the acquired segments", offset));
}

void GptModel::acquire_params(std::pair<int64_t, int64_t> range) {
  if (!source_) return;
  for (auto& h : held_)
    if (h.begin == range.first) {
      ++h.refs;
      return;
    }
  held_.push_back(HeldSegment{range.first, range.second, source_->acquire(range.first, range.second), 1});
}

void GptModel::release_params(std::pair<int64_t, int64_t> range) {
  if (!source_) return;
  const auto it = std::find_if(held_.begin(), held_.end(), [&](const auto& h) { return h.begin == range.first; });
  TRIDENT_CHECK(it != held_.end(), "internal: releasing parameters [{}, {}) not acquired", range.first, range.second);
  if (--it->refs > 0) return;
  held_.erase(it);
  source_->release(range.first, range.second);
}

void GptModel::prefetch_params(std::pair<int64_t, int64_t> range) {
  if (source_) source_->prefetch(range.first, range.second);
}

float* GptModel::grad(int64_t offset) {
  if (!sink_) return grads_ + offset;
  for (const auto& s : open_)
    if (s.begin <= offset && offset < s.end) return s.data + (offset - s.begin);
  throw Error(fmt::format("internal: gradient element {} written outside the open segments", offset));
}

void GptModel::open_grads(int64_t begin, int64_t end) {
  if (sink_) open_.push_back(OpenSegment{begin, end, sink_->open(begin, end)});
}

void GptModel::close_grads() {
  for (const auto& s : open_) sink_->close(s.begin, s.end);
  open_.clear();
}

double GptModel::gradient_norm() {
  k_.fill_double(norm_sums_, 0.0, 2);
  add_gradient_square_sums(norm_sums_, false, grads_, 0, layout_.total());
  double sums[2];
  k_.copy_to_host_double(sums, norm_sums_, 2);
  if (tp_.size() > 1) tp_.group->all_reduce_host(&sums[0], 1);
  return std::sqrt(sums[0] + sums[1]);
}

}  // namespace trident
