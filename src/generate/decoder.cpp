#include "generate/decoder.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace trident {

Decoder::Decoder(const GptShapes& shapes, const ParameterLayout& layout, const float* params, Kernels& kernels,
                 Group* tp, int64_t batch, int64_t max_len)
    : s_(shapes), layout_(layout), params_(params), k_(kernels), tp_(tp), batch_(batch), max_len_(max_len) {
  const int t = tp_ ? tp_->size() : 1;
  TRIDENT_CHECK(layout_.tp_size() == t, "decoder: a layout for tp {} on a TP group of {}", layout_.tp_size(), t);
  TRIDENT_CHECK(layout_.has_embedding() && layout_.has_head() && layout_.layer_begin() == 0 &&
                    layout_.layer_end() == s_.L,
                "decoder: needs the whole model on this rank (pp = 1)");
  TRIDENT_CHECK(params_ != nullptr, "decoder: no parameters (a ZeRO-3 chunk keeps none whole)");
  TRIDENT_CHECK(batch_ >= 1 && max_len_ >= 1 && max_len_ <= s_.T,
                "decoder: {} sequences of {} tokens (the model's positions: {})", batch_, max_len_, s_.T);
  NHl_ = s_.NH / t;
  KVHl_ = s_.KVH >= t ? s_.KVH / t : 1;
  Cl_ = NHl_ * s_.HD;
  QKVl_ = (NHl_ + 2 * KVHl_) * s_.HD;
  Fl_ = s_.F / t;
  Vl_ = s_.Vp / t;
  for (int64_t l = 0; l < s_.L; ++l) cache_.push_back(take(batch_ * max_len_ * QKVl_));
  if (s_.rope) {
    const std::vector<float> table = rope_table(s_.rope_theta, s_.HD, max_len_);
    rope_table_ = take(int64_t(table.size()));
    k_.copy_to_device(rope_table_, table.data(), int64_t(table.size()));
  }
  tokens_ = k_.alloc_int(batch_ * max_len_);
  owned_.push_back(tokens_);
  bytes_ += batch_ * max_len_ * int64_t(sizeof(int32_t));
}

Decoder::~Decoder() {
  for (void* p : scratch_) k_.free(p);
  for (void* p : owned_) k_.free(p);
}

float* Decoder::take(int64_t n) {
  float* p = k_.alloc(n);
  owned_.push_back(p);
  bytes_ += n * int64_t(sizeof(float));
  return p;
}

void Decoder::reserve(int64_t rows) {
  if (rows <= rows_) return;
  for (void* p : scratch_) k_.free(p);
  scratch_.clear();
  const int64_t C = s_.C;
  auto make = [&](int64_t n) {
    float* p = k_.alloc(n);
    scratch_.push_back(p);
    return p;
  };
  x_ = make(rows * C);
  ln_ = make(rows * C);
  qkv_ = make(rows * QKVl_);
  atty_ = make(rows * Cl_);
  branch_ = make(rows * C);
  fch_ = make(rows * (s_.swiglu ? 2 * Fl_ : Fl_));
  fchg_ = make(rows * Fl_);
  mean_ = make(rows);
  rstd_ = make(rows);
  logits_ = make(rows * Vl_);
  losses_ = make(rows);
  rowmax_ = make(rows);
  sumexp_ = make(2 * rows);  // the sums and the target logits side by side: one TP all-reduce
  targets_ = k_.alloc_int(rows);
  scratch_.push_back(targets_);
  rows_ = rows;
}

void Decoder::reduce(float* x, int64_t count) {
  if (tp_ && tp_->size() > 1) tp_->all_reduce(x, count);
}

void Decoder::run_layers(const int32_t* tokens, int64_t n) {
  TRIDENT_CHECK(n >= 1 && length_ + n <= max_len_, "decoder: {} more tokens after {} exceed the {} positions",
                n, length_, max_len_);
  const int64_t R = batch_ * n, C = s_.C;
  reserve(R);
  k_.copy_to_device_int(tokens_, tokens, R);
  k_.embedding_forward(x_, tokens_, params_ + layout_.wte(), layout_.vocab_begin(), Vl_, R, C);
  reduce(x_, R * C);
  if (layout_.wpe() >= 0) k_.position_forward(x_, params_ + layout_.wpe(), batch_, n, C, length_);
  for (int64_t l = 0; l < s_.L; ++l) layer(l, n);
  length_ += n;
}

std::vector<float> Decoder::feed(const int32_t* tokens, int64_t n, bool all_positions) {
  run_layers(tokens, n);
  return logits(n, all_positions);
}

std::vector<float> Decoder::feed_losses(const int32_t* tokens, int64_t n, const int32_t* targets) {
  run_layers(tokens, n);
  const int64_t R = batch_ * n, vocab_begin = layout_.vocab_begin();
  const int64_t real = std::clamp<int64_t>(s_.V - vocab_begin, 0, Vl_);
  head(x_, R);
  k_.copy_to_device_int(targets_, targets, R);
  const bool tp = tp_ && tp_->size() > 1;
  k_.xent_row_max(rowmax_, logits_, R, Vl_, real);
  if (tp) tp_->all_reduce(rowmax_, R, ReduceOp::Max);
  k_.xent_sumexp_target(sumexp_, sumexp_ + R, logits_, rowmax_, targets_, vocab_begin, R, Vl_, real);
  if (tp) tp_->all_reduce(sumexp_, 2 * R);
  k_.xent_loss_grad(losses_, logits_, rowmax_, sumexp_, sumexp_ + R, targets_, vocab_begin, 0.f, R, Vl_, real);
  std::vector<float> losses(static_cast<size_t>(R));
  k_.copy_to_host(losses.data(), losses_, R);
  return losses;
}

const float* Decoder::weight(int64_t offset) const { return offset < 0 ? nullptr : params_ + offset; }

void Decoder::norm(const float* x, int64_t rows, int64_t weight_offset, int64_t bias_offset) {
  if (s_.rmsnorm) {
    k_.rmsnorm_forward(ln_, rstd_, x, weight(weight_offset), rows, s_.C, s_.norm_eps);
  } else {
    k_.layernorm_forward(ln_, mean_, rstd_, x, weight(weight_offset), weight(bias_offset), rows, s_.C, s_.norm_eps);
  }
}

// x += attn(norm1(x)); x += mlp(norm2(x)) for the n new rows of each sequence. The cache keeps each
// row's q | k | v with RoPE applied at its position.
void Decoder::layer(int64_t l, int64_t n) {
  const auto& p = layout_.layer(l);
  const int64_t R = batch_ * n, C = s_.C, row = QKVl_, fc = s_.swiglu ? 2 * Fl_ : Fl_;
  const bool bias_here = !tp_ || tp_->rank() == 0;  // row-parallel biases enter the reduction once
  norm(x_, R, p.ln1_w, p.ln1_b);
  k_.matmul_forward(qkv_, ln_, weight(p.qkv_w), weight(p.qkv_b), R, C, row);
  float* cache = cache_[l];
  for (int64_t b = 0; b < batch_; ++b)
    k_.copy(cache + (b * max_len_ + length_) * row, qkv_ + b * n * row, n * row);
  if (s_.rope) k_.rope_forward(cache, rope_table_, batch_, max_len_, NHl_, KVHl_, s_.HD, length_, n);
  k_.attention_forward_rows(atty_, cache, batch_, max_len_, NHl_, KVHl_, s_.HD, length_, n);
  k_.matmul_forward(branch_, atty_, weight(p.attn_proj_w), bias_here ? weight(p.attn_proj_b) : nullptr, R, Cl_, C);
  reduce(branch_, R * C);
  if (s_.rmsnorm)  // x += attn, then norm2(x), fused
    k_.residual_rmsnorm_forward(x_, branch_, ln_, rstd_, weight(p.ln2_w), R, C, s_.norm_eps);
  else
    k_.residual_layernorm_forward(x_, branch_, ln_, mean_, rstd_, weight(p.ln2_w), weight(p.ln2_b), R, C, s_.norm_eps);
  k_.matmul_forward(fch_, ln_, weight(p.fc_w), weight(p.fc_b), R, C, fc);
  if (s_.swiglu) {
    k_.swiglu_forward(fchg_, fch_, R, Fl_);
  } else {
    k_.gelu_forward(fchg_, fch_, R * Fl_);
  }
  k_.matmul_forward(branch_, fchg_, weight(p.fc_proj_w), bias_here ? weight(p.fc_proj_b) : nullptr, R, Fl_, C);
  reduce(branch_, R * C);
  k_.accumulate(x_, branch_, R * C);
}

void Decoder::head(const float* top, int64_t rows) {
  const int64_t C = s_.C;
  norm(top, rows, layout_.lnf_w(), layout_.lnf_b());
  k_.matmul_forward(logits_, ln_, params_ + layout_.lm_head(), nullptr, rows, C, Vl_);
}

// Final LayerNorm and LM head on the rows wanted; the vocabulary shards are gathered on the host.
std::vector<float> Decoder::logits(int64_t n, bool all_positions) {
  const int64_t C = s_.C;
  int64_t rows = batch_ * n;
  const float* top = x_;
  if (!all_positions) {  // each sequence's last row, packed into branch_
    for (int64_t b = 0; b < batch_; ++b) k_.copy(branch_ + b * C, x_ + (b * n + n - 1) * C, C);
    rows = batch_;
    top = branch_;
  }
  head(top, rows);
  std::vector<float> local(size_t(rows * Vl_));
  k_.copy_to_host(local.data(), logits_, rows * Vl_);
  const int t = tp_ ? tp_->size() : 1;
  std::vector<float> shards = local;
  if (t > 1) {
    shards.resize(local.size() * t);
    tp_->all_gather_host(local.data(), shards.data(), rows * Vl_);
  }
  std::vector<float> out(size_t(rows * s_.V));
  for (int r = 0; r < t; ++r) {
    const int64_t begin = r * Vl_, real = std::clamp<int64_t>(s_.V - begin, 0, Vl_);
    for (int64_t i = 0; i < rows; ++i)
      std::copy_n(&shards[(r * rows + i) * Vl_], real, &out[i * s_.V + begin]);
  }
  return out;
}

}  // namespace trident
