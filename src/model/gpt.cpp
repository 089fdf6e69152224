#include "model/gpt.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace trident {

GptModel::GptModel(const GptShapes& s, Kernels& kernels, ActivationPolicy policy, int64_t B, TensorParallel tp,
                   ChunkSpec chunk, WholeBuffers whole)
    : shapes_(s),
      k_(kernels),
      recompute_(policy.recompute),
      bf16_(policy.precision == Precision::BF16),
      tp_(tp),
      sp_(tp.sequence_parallel && tp.size() > 1),
      B_(B),
      N_(B * s.T),
      layout_(s, tp.rank(), tp.size(), chunk),
      global_layout_(s, 0, 1, chunk) {
  const int t = tp_.size();
  TRIDENT_CHECK(s.NH % t == 0 && s.F % t == 0 && s.Vp % t == 0,
                "heads {}, ffn_hidden {} and padded vocabulary {} must all be divisible by tp = {}", s.NH, s.F, s.Vp, t);
  TRIDENT_CHECK(s.NH % s.KVH == 0 && (s.KVH % t == 0 || t % s.KVH == 0),
                "kv_heads {} must divide heads {} and divide or be divisible by tp = {}", s.KVH, s.NH, t);
  TRIDENT_CHECK(!sp_ || N_ % t == 0, "sequence parallelism needs micro_batch*seq_len = {} divisible by tp = {}", N_, t);
  Nl_ = sp_ ? N_ / t : N_;
  row0_ = sp_ ? tp_.rank() * Nl_ : 0;
  NHl_ = s.NH / t;
  KVHl_ = s.KVH >= t ? s.KVH / t : 1;  // fewer kv heads than ranks: each rank holds one, replicated
  Cl_ = NHl_ * s.HD;
  QKVl_ = (NHl_ + 2 * KVHl_) * s.HD;
  Fl_ = s.F / t;
  FCl_ = s.swiglu ? 2 * Fl_ : Fl_;
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
  if (bf16_ && recompute_ != Recompute::Full)
    for (const auto& f : packed_fields()) work_acts_.*f.value = take(f.n, false, &owned_);
  if (layout_.has_head()) {
    targets_ = k_.alloc_int(N);
    owned_.push_back(targets_);
    lnf_ = take(Nl * C, false, &owned_);
    lnf_mean_ = take(Nl, false, &owned_);
    lnf_rstd_ = take(Nl, false, &owned_);
    head_rows_ = logits_chunk_rows(policy.logits_chunk_bytes, Vl_, N);
    logits_ = take(head_rows_ * Vl_, false, &owned_);
    losses_ = take(N, false, &owned_);
    rowmax_ = take(head_rows_, false, &owned_);
    sumexp_ = take(2 * head_rows_, false, &owned_);
  }
  dres_ = take(Nl * C, false, &owned_);
  dln_ = take(N * C, false, &owned_);
  dqkv_ = take(N * QKVl_, false, &owned_);
  dfch_ = take(N * FCl_, false, &owned_);
  dfchg_ = take(N * Fl_, false, &owned_);
  if (sp_) {
    gathered_ = take(N * C, false, &owned_);
    partial_ = take(N * C, false, &owned_);
  }
  if (s.rope) {
    const std::vector<float> table = rope_table(s.rope_theta, s.HD, s.T);
    rope_table_ = take(int64_t(table.size()), false, &owned_);
    k_.copy_to_device(rope_table_, table.data(), int64_t(table.size()));
  }
  for (const auto& tensor : layout_.tensors())
    if (tensor.replicas > 1) replica_sum_size_ = std::max(replica_sum_size_, tensor.numel * (t / tensor.replicas));
  if (replica_sum_size_ > 0) replica_sum_ = take(replica_sum_size_, false, &owned_);
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

std::array<GptModel::PackedField, 6> GptModel::packed_fields() const {
  const int64_t N = N_, Nl = Nl_, C = shapes_.C;
  return {{{&LayerActs::ln1, &PackedActs::ln1, Nl * C},
           {&LayerActs::qkv, &PackedActs::qkv, N * QKVl_},
           {&LayerActs::atty, &PackedActs::atty, N * Cl_},
           {&LayerActs::ln2, &PackedActs::ln2, Nl * C},
           {&LayerActs::fch, &PackedActs::fch, N * FCl_},
           {&LayerActs::fchg, &PackedActs::fchg, N * Fl_}}};
}

// A slot's set under bf16 storage takes the packed fields from work_acts_ (the slot keeps their
// patterns, make_packed_acts) and its own fp32 buffers for the rest.
GptModel::LayerActs GptModel::make_layer_acts(bool saved, std::vector<void*>* owner) {
  const int64_t Nl = Nl_, C = shapes_.C;
  LayerActs a{};
  for (const auto& f : packed_fields()) a.*f.value = saved && bf16_ ? work_acts_.*f.value : take(f.n, saved, owner);
  a.ln1_mean = take(Nl, saved, owner);
  a.ln1_rstd = take(Nl, saved, owner);
  a.x2 = take(Nl * C, saved, owner);
  a.ln2_mean = take(Nl, saved, owner);
  a.ln2_rstd = take(Nl, saved, owner);
  a.lse = recompute_ == Recompute::None ? take(B_ * NHl_ * shapes_.T, saved, owner) : lse_scratch_;
  return a;
}

GptModel::PackedActs GptModel::make_packed_acts(std::vector<void*>* owner) {
  PackedActs p{};
  for (const auto& f : packed_fields()) {
    owner->push_back(p.*f.bits = k_.alloc_bf16(f.n));
    slot_bytes_ += f.n * int64_t(sizeof(uint16_t));
  }
  return p;
}

const GptModel::PackedActs* GptModel::packed_for(const Slot& s, int64_t l) const {
  return s.packed.empty() ? nullptr : &s.packed[l - L0_];
}

void GptModel::keep(float* x, const PackedActs* packed, uint16_t* PackedActs::*field, int64_t n) {
  if (bf16_) k_.round_to_bf16(x, packed ? packed->*field : nullptr, n);
}

GptModel::Rounding GptModel::kept_rounding(const PackedActs* packed, uint16_t* PackedActs::*field) const {
  return {bf16_, bf16_ && packed ? packed->*field : nullptr};
}

void GptModel::unpack(const PackedActs& packed, const LayerActs& a) {
  for (const auto& f : packed_fields())
    if (backward_reads_values(f.bits)) k_.unpack_bf16(a.*f.value, packed.*f.bits, f.n);
}

// The MLP activation is read by its GEMM alone; the norm outputs too, unless SP all-gathers them first
// (in fp32); q|k|v, the attention output and the MLP pre-activation by attention's and the activation's
// backward as well.
bool GptModel::backward_reads_values(uint16_t* PackedActs::*field) const {
  if (field == &PackedActs::fchg) return false;
  if (field == &PackedActs::ln1 || field == &PackedActs::ln2) return sp_;
  return true;
}

GemmInput GptModel::kept(const float* values, const PackedActs* packed, uint16_t* PackedActs::*field) const {
  return {values, packed ? packed->*field : nullptr};
}

GemmInput GptModel::kept_for_backward(const float* values, const PackedActs* packed,
                                      uint16_t* PackedActs::*field) const {
  if (!packed) return values;
  return backward_reads_values(field) ? kept(values, packed, field) : GemmInput::patterns(packed->*field);
}

// SP all-gathers this rank's rows in fp32 (backward_reads_values keeps them unpacked then).
GemmInput GptModel::norm_output(const float* local, const PackedActs* packed, uint16_t* PackedActs::*field,
                                bool backward) {
  if (sp_) return to_full(local, shapes_.C);
  return backward ? kept_for_backward(local, packed, field) : kept(local, packed, field);
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
      for (int64_t i = 0; i < nl_; ++i) {
        slot->acts.push_back(make_layer_acts(true, &slot->owned));
        if (bf16_) slot->packed.push_back(make_packed_acts(&slot->owned));
      }
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

void GptModel::norm_forward(float* out, float* mean, float* rstd, const float* x, int64_t weight, int64_t bias,
                            Rounding rounding) {
  const int64_t C = shapes_.C;
  const float eps = shapes_.norm_eps;
  if (shapes_.rmsnorm && rounding.round) {
    k_.rmsnorm_forward_rounded(rounding.packed, out, rstd, x, param(weight), Nl_, C, eps);
  } else if (shapes_.rmsnorm) {
    k_.rmsnorm_forward(out, rstd, x, param(weight), Nl_, C, eps);
  } else if (rounding.round) {
    k_.layernorm_forward_rounded(rounding.packed, out, mean, rstd, x, param(weight), optional_param(bias), Nl_, C, eps);
  } else {
    k_.layernorm_forward(out, mean, rstd, x, param(weight), optional_param(bias), Nl_, C, eps);
  }
}

void GptModel::residual_norm_forward(float* out, float* mean, float* rstd, float* x, const float* residual,
                                     int64_t weight, int64_t bias, Rounding rounding) {
  const int64_t C = shapes_.C;
  const float eps = shapes_.norm_eps;
  if (shapes_.rmsnorm && rounding.round) {
    k_.residual_rmsnorm_forward_rounded(rounding.packed, x, residual, out, rstd, param(weight), Nl_, C, eps);
  } else if (shapes_.rmsnorm) {
    k_.residual_rmsnorm_forward(x, residual, out, rstd, param(weight), Nl_, C, eps);
  } else if (rounding.round) {
    k_.residual_layernorm_forward_rounded(rounding.packed, x, residual, out, mean, rstd, param(weight),
                                          optional_param(bias), Nl_, C, eps);
  } else {
    k_.residual_layernorm_forward(x, residual, out, mean, rstd, param(weight), optional_param(bias), Nl_, C, eps);
  }
}

void GptModel::norm_backward(float* dx, int64_t weight, int64_t bias, const float* dout, const float* x,
                             const float* mean, const float* rstd) {
  if (shapes_.rmsnorm) {
    k_.rmsnorm_backward(dx, grad(weight), dout, x, param(weight), rstd, Nl_, shapes_.C);
  } else {
    k_.layernorm_backward(dx, grad(weight), optional_grad(bias), dout, x, param(weight), mean, rstd, Nl_, shapes_.C);
  }
}

std::optional<GptModel::NextNorm> GptModel::norm_after(const Slot& sl, int64_t l) const {
  if (l + 1 < L0_ + nl_) {
    const LayerActs& next = acts_for(sl, l + 1);
    const auto& p = layout_.layer(l + 1);
    const Rounding kept_ln1 = kept_rounding(packed_for(sl, l + 1), &PackedActs::ln1);
    return NextNorm{next.ln1, next.ln1_mean, next.ln1_rstd, p.ln1_w, p.ln1_b, layer_range(l + 1), kept_ln1};
  }
  if (layout_.has_head())
    return NextNorm{lnf_, lnf_mean_, lnf_rstd_, layout_.lnf_w(), layout_.lnf_b(), head_params(), {}};
  return std::nullopt;
}

void GptModel::layer_forward(Slot& sl, int64_t l, const LayerActs& a, bool ln1_done, const NextNorm* next) {
  const auto& s = shapes_;
  const auto& p = layout_.layer(l);
  const int64_t N = N_, Nl = Nl_, C = s.C;
  const bool bias_here = tp_.rank() == 0;  // row-parallel biases enter the reduction once
  const float* x = sl.residual[l - L0_];
  const PackedActs* pk = packed_for(sl, l);
  acquire_params(layer_range(l));
  // (ln1_done: the previous layer's fused add computed ln_1, rounded as it is kept here: NextNorm::rounding.)
  if (!ln1_done) norm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, p.ln1_w, p.ln1_b, kept_rounding(pk, &PackedActs::ln1));
  k_.matmul_forward(a.qkv, norm_output(a.ln1, pk, &PackedActs::ln1, false), weight(p.qkv_w), optional_param(p.qkv_b),
                    N, C, QKVl_);
  if (s.rope) k_.rope_forward(a.qkv, rope_table_, B_, s.T, NHl_, KVHl_, s.HD, 0, s.T);
  keep(a.qkv, pk, &PackedActs::qkv, N * QKVl_);
  k_.attention_forward(a.atty, a.lse, a.qkv, B_, s.T, NHl_, KVHl_, s.HD);
  keep(a.atty, pk, &PackedActs::atty, N * Cl_);
  k_.matmul_forward(partial_for(a.x2), kept(a.atty, pk, &PackedActs::atty), weight(p.attn_proj_w),
                    bias_here ? optional_param(p.attn_proj_b) : nullptr, N, Cl_, C);
  from_partial(partial_for(a.x2), a.x2, C);
  residual_norm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.x2, x, p.ln2_w, p.ln2_b,  // x2 = x + attn, ln_2 of it
                        kept_rounding(pk, &PackedActs::ln2));
  k_.matmul_forward(a.fch, norm_output(a.ln2, pk, &PackedActs::ln2, false), weight(p.fc_w), optional_param(p.fc_b), N,
                    C, FCl_);
  keep(a.fch, pk, &PackedActs::fch, N * FCl_);
  const Rounding act = kept_rounding(pk, &PackedActs::fchg);
  if (s.swiglu && act.round) {
    k_.swiglu_forward_rounded(act.packed, a.fchg, a.fch, N, Fl_);
  } else if (s.swiglu) {
    k_.swiglu_forward(a.fchg, a.fch, N, Fl_);
  } else if (act.round) {
    k_.gelu_forward_rounded(act.packed, a.fchg, a.fch, N * Fl_);
  } else {
    k_.gelu_forward(a.fchg, a.fch, N * Fl_);
  }
  float* out = sl.residual[l - L0_ + 1];
  k_.matmul_forward(partial_for(out), kept(a.fchg, pk, &PackedActs::fchg), weight(p.fc_proj_w),
                    bias_here ? optional_param(p.fc_proj_b) : nullptr, N, Fl_, C);
  from_partial(partial_for(out), out, C);
  // The layer boundary reads activations and the next norm's weights only: this layer's parameters go
  // first (also the hold its ln_1 took, acquired by the previous layer), so one layer is held at a time.
  release_params(layer_range(l));
  if (ln1_done) release_params(layer_range(l));
  if (next) {  // out = x2 + mlp, and the next norm of it
    acquire_params(next->segment);
    residual_norm_forward(next->out, next->mean, next->rstd, out, a.x2, next->weight, next->bias, next->rounding);
  } else {
    k_.accumulate(out, a.x2, Nl * C);
  }
}

// On entry dres_ holds dL/d(output of layer l) for this rank's rows; on exit dL/d(input of layer l).
void GptModel::layer_backward(Slot& sl, int64_t l, const LayerActs& a) {
  const auto& s = shapes_;
  const auto& p = layout_.layer(l);
  const int64_t N = N_, C = s.C;
  float* dln_local = sp_ ? partial_ : dln_;  // input gradient of a column-parallel GEMM, reduced
  acquire_params(layer_range(l));
  if (l > L0_) prefetch_params(layer_range(l - 1));
  const PackedActs* pk = packed_for(sl, l);  // null under full recompute: its rerun keeps fp32 values
  if (recompute_ == Recompute::Full) {
    layer_forward(sl, l, a);
  } else {
    if (pk) unpack(*pk, a);
    if (recompute_ == Recompute::Selective)
      k_.attention_forward(atty_scratch_, a.lse, a.qkv, B_, s.T, NHl_, KVHl_, s.HD);  // same bits as a.atty
  }
  open_grads(layer_range(l).first, layer_range(l).second);
  // MLP branch; the residual passes dres through unchanged and the norm's backward adds to it.
  k_.matmul_backward_overwrite(dfchg_, grad(p.fc_proj_w), optional_grad(p.fc_proj_b), to_full(dres_, C),
                               kept_for_backward(a.fchg, pk, &PackedActs::fchg), weight(p.fc_proj_w), N, Fl_, C);
  if (s.swiglu) {
    k_.swiglu_backward_overwrite(dfch_, a.fch, dfchg_, N, Fl_);
  } else {
    k_.gelu_backward_overwrite(dfch_, a.fch, dfchg_, N * Fl_);
  }
  k_.matmul_backward_overwrite(dln_, grad(p.fc_w), optional_grad(p.fc_b), dfch_,
                               norm_output(a.ln2, pk, &PackedActs::ln2, true), weight(p.fc_w), N, C, FCl_);
  from_partial(dln_, dln_local, C);
  norm_backward(dres_, p.ln2_w, p.ln2_b, dln_local, a.x2, a.ln2_mean, a.ln2_rstd);
  // Attention branch (dln_ first holds the gradient of the attention output, [N, Cl]).
  k_.matmul_backward_overwrite(dln_, grad(p.attn_proj_w), optional_grad(p.attn_proj_b), to_full(dres_, C),
                               kept_for_backward(a.atty, pk, &PackedActs::atty), weight(p.attn_proj_w), N, Cl_, C);
  k_.attention_backward_overwrite(dqkv_, dln_, a.qkv, a.atty, a.lse, B_, s.T, NHl_, KVHl_, s.HD);
  if (s.rope) k_.rope_backward(dqkv_, rope_table_, B_, s.T, NHl_, KVHl_, s.HD, 0, s.T);
  k_.matmul_backward_overwrite(dln_, grad(p.qkv_w), optional_grad(p.qkv_b), dqkv_,
                               norm_output(a.ln1, pk, &PackedActs::ln1, true), weight(p.qkv_w), N, C, QKVl_);
  from_partial(dln_, dln_local, C);
  norm_backward(dres_, p.ln1_w, p.ln1_b, dln_local, sl.residual[l - L0_], a.ln1_mean, a.ln1_rstd);
  close_grads();
  release_params(layer_range(l));
}

// Final LN, then the logits and the vocab-parallel fused cross-entropy chunk by chunk of rows; with_grad:
// each chunk's LM-head backward right after its loss (the chunk's logits then hold its gradient), then
// the final LN's backward into s.dtop. The per-position losses are summed onto loss_sum_.
void GptModel::head_forward(Slot& sl, const int32_t* targets, float dloss_scale, bool with_grad, bool lnf_done) {
  const int64_t N = N_, Nl = Nl_, C = shapes_.C;
  const float* top = sl.residual[nl_];
  const std::pair<int64_t, int64_t> tail{layout_.lnf_w(), layout_.total()};  // ln_f and an untied lm_head
  const std::pair<int64_t, int64_t> wte{layout_.wte(), layout_.wte() + Vl_ * C};
  const bool widened_head = !param_patterns_;  // else the LM head's GEMMs read its patterns
  acquire_params(head_params());
  if (shapes_.tied && widened_head) acquire_params(wte);
  k_.copy_to_device_int(targets_, targets, N);
  if (!lnf_done) norm_forward(lnf_, lnf_mean_, lnf_rstd_, top, layout_.lnf_w(), layout_.lnf_b());
  const float* lnf_full = to_full(lnf_, C);  // stays intact: nothing is gathered until the head's end
  if (with_grad) {
    open_grads(tail.first, tail.second);
    if (shapes_.tied) open_grads(wte.first, wte.second);
  }
  for (int64_t r0 = 0; r0 < N; r0 += head_rows_) head_rows(r0, std::min(head_rows_, N - r0), lnf_full, dloss_scale, with_grad);
  k_.sum_into(loss_sum_, losses_, N);
  if (with_grad) {
    float* dln_local = sp_ ? partial_ : dln_;
    from_partial(dln_, dln_local, C);
    k_.fill(sl.dtop, 0.f, Nl * C);
    norm_backward(sl.dtop, layout_.lnf_w(), layout_.lnf_b(), dln_local, top, lnf_mean_, lnf_rstd_);
    close_grads();
  }
  release_params(head_params());
  if (shapes_.tied && widened_head) release_params(wte);
}

// Max, sum of exponentials and target logit are reduced over the vocabulary shards; the logits never
// are. sumexp_ holds the chunk's n sums and then its n target logits: one TP all-reduce for both.
void GptModel::head_rows(int64_t r0, int64_t n, const float* lnf_full, float dloss_scale, bool with_grad) {
  const int64_t C = shapes_.C;
  const float* x = lnf_full + r0 * C;
  float* target_logit = sumexp_ + n;
  k_.matmul_forward(logits_, x, weight(layout_.lm_head()), nullptr, n, C, Vl_);
  k_.xent_row_max(rowmax_, logits_, n, Vl_, vocab_real_);
  if (tp_.size() > 1) tp_.group->all_reduce(rowmax_, n, ReduceOp::Max);
  k_.xent_sumexp_target(sumexp_, target_logit, logits_, rowmax_, targets_ + r0, vocab_begin_, n, Vl_, vocab_real_);
  if (tp_.size() > 1) tp_.group->all_reduce(sumexp_, 2 * n);
  k_.xent_loss_grad(losses_ + r0, logits_, rowmax_, sumexp_, target_logit, targets_ + r0, vocab_begin_, dloss_scale, n,
                    Vl_, vocab_real_);
  if (with_grad)  // logits_ now holds dloss_scale * dL/dlogits of these rows; dln_'s rows are written
    k_.matmul_backward_overwrite(dln_ + r0 * C, grad(layout_.lm_head()), nullptr, logits_, x,
                                 weight(layout_.lm_head()), n, C, Vl_);
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
    const bool learned_positions = layout_.wpe() >= 0;
    if (!param_patterns_) acquire_params(wte);  // else its rows are read from the patterns
    if (learned_positions) acquire_params(wpe);
    if (nl_ > 0) prefetch_params(layer_range(L0_));
    if (param_patterns_) {
      k_.embedding_forward_bf16(partial_for(x0), sl.tokens, param_patterns_ + layout_.wte(), vocab_begin_, Vl_, N, C);
    } else {
      k_.embedding_forward(partial_for(x0), sl.tokens, param(layout_.wte()), vocab_begin_, Vl_, N, C);
    }
    from_partial(partial_for(x0), x0, C);
    if (learned_positions) {
      add_positions(x0);
      release_params(wpe);
    }
    if (!param_patterns_) release_params(wte);
  } else {
    k_.copy(sl.residual[0], input, Nl_ * C);
  }
  for (int64_t l = L0_; l < L0_ + nl_; ++l) {
    // (Prefetched here, not in layer_forward, which full recompute also runs inside backward.)
    if (l + 1 < L0_ + nl_) {
      prefetch_params(layer_range(l + 1));
    } else if (layout_.has_head()) {
      prefetch_params(head_params());
    }
    const std::optional<NextNorm> next = norm_after(sl, l);
    layer_forward(sl, l, acts_for(sl, l), l > L0_, next ? &*next : nullptr);  // (layer l > L0's ln_1: by l - 1)
  }
  if (layout_.has_head()) {
    if (with_grad && hooks_.writing) {
      hooks_.writing(layout_.lnf_w(), layout_.total());
      if (shapes_.tied) hooks_.writing(layout_.wte(), layout_.wte() + Vl_ * shapes_.C);  // the LM head is wte
    }
    head_forward(sl, targets, dloss_scale, with_grad, nl_ > 0);
    if (nl_ > 0) release_params(head_params());  // acquired for ln_f by the last layer
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
    if (hooks_.final_from && layout_.layer(l).begin > 0) hooks_.final_from(layout_.layer(l).begin);
  }
  free_slot(sl);
  if (layout_.has_embedding()) {
    open_grads(layout_.wte(), layout_.wte() + Vl_ * C);
    if (layout_.wpe() >= 0) open_grads(layout_.wpe(), layout_.wpe() + shapes_.T * C);
    k_.embedding_backward(grad(layout_.wte()), to_full(dres_, C), sl.tokens, vocab_begin_, Vl_, N_, C);
    if (layout_.wpe() >= 0) position_grads(grad(layout_.wpe()), dres_);
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

bool GptModel::needs_finish_gradients() const { return sp_ || replica_sum_ != nullptr; }

void GptModel::finish_gradients(float* range_grads, int64_t begin, int64_t end) {
  for (const auto& t : layout_.tensors()) {
    const int64_t first = std::max(begin, t.offset), last = std::min(end, t.offset + t.numel);
    if (first >= last) continue;
    // LayerNorms and the position embedding saw only this rank's tokens. The row-parallel biases did
    // not: their gradient comes from the all-gathered output gradient, already whole on every rank.
    if (sp_ && t.split == TpSplit::None && t.kind != ParamKind::Bias)
      tp_.group->all_reduce(range_grads + (first - begin), last - first);
    if (t.replicas > 1) sum_over_replicas(t, range_grads + (first - begin), last - first);
  }
}

// A k or v slice held by `replicas` ranks (tp > kv_heads) got from each only its own query heads'
// gradient: each rank puts its slice's gradient at its part's place in a buffer of all parts, one
// all-reduce over the TP group sums the replicas of every part, and each takes back its part's sum.
void GptModel::sum_over_replicas(const ParamTensor& t, float* g, int64_t n) {
  const int parts = tp_.size() / t.replicas, part = t.part(tp_.rank());
  k_.fill(replica_sum_, 0.f, parts * n);
  k_.copy(replica_sum_ + part * n, g, n);
  tp_.group->all_reduce(replica_sum_, parts * n);
  k_.copy(g, replica_sum_ + part * n, n);
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
    if (first >= last || tp_.rank() % t.replicas != 0) continue;  // a replicated k/v slice counted once
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
  return {layout_.layer(l).begin, layout_.layer(l).end};
}

void GptModel::set_parameter_source(ParameterSource* source) {
  TRIDENT_CHECK(source && held_.empty(), "internal: set_parameter_source needs a source and no held segment");
  source_ = source;
  param_patterns_ = source->patterns();
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

// ln_f, and an untied LM head unless the GEMMs read the weights' patterns (then it is never widened).
std::pair<int64_t, int64_t> GptModel::head_params() const {
  return {layout_.lnf_w(), param_patterns_ && !shapes_.tied ? layout_.lm_head() : layout_.total()};
}

GemmInput GptModel::weight(int64_t offset) const {
  return param_patterns_ ? GemmInput::patterns(param_patterns_ + offset) : GemmInput(param(offset));
}

const float* GptModel::optional_param(int64_t offset) const { return offset < 0 ? nullptr : param(offset); }

float* GptModel::optional_grad(int64_t offset) { return offset < 0 ? nullptr : grad(offset); }

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
