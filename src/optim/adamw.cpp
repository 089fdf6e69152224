#include "optim/adamw.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace trident {

AdamW::AdamW(const ParameterLayout& layout, Kernels& kernels, const TrainConfig& cfg, int64_t begin, int64_t end,
             WorkingCopyView working_copy)
    : layout_(layout), k_(kernels), cfg_(cfg), begin_(begin), end_(end < 0 ? layout.total() : end),
      working_(working_copy) {
  TRIDENT_CHECK(0 <= begin_ && begin_ <= end_ && end_ <= layout_.total(), "AdamW range [{}, {}) outside [0, {})",
                begin_, end_, layout_.total());
  for (const auto& t : layout_.tensors()) {
    // The part of tensor t inside this optimizer's range.
    const int64_t first = std::max(t.offset, begin_), last = std::min(t.offset + t.numel, end_);
    if (first >= last) continue;
    const float wd = t.decayed() ? float(cfg_.weight_decay) : 0.f;
    if (segments_.empty() || segments_.back().weight_decay != wd) segments_.push_back({first - begin_, wd});
  }
  const int64_t n = std::max<int64_t>(end_ - begin_, 1);
  m_ = k_.alloc(n);
  v_ = k_.alloc(n);
  if (working_.patterns) master_ = k_.alloc(n);
}

AdamW::~AdamW() {
  k_.free(m_);
  k_.free(v_);
  if (master_) k_.free(master_);
}

void AdamW::write_working_copy() {
  if (!master_) return;
  k_.pack_bf16(master_, working_.patterns + begin_, end_ - begin_);
  copy_fp32_tensors();
}

void AdamW::copy_fp32_tensors() {
  const Fp32Tensors& kept = *working_.fp32_tensors;
  kept.split(begin_, end_, [&](int64_t a, int64_t b, bool fp32) {
    if (fp32) k_.copy(working_.fp32 + kept.packed_offset(a), master_ + (a - begin_), b - a);
  });
}

void AdamW::update(float* range_params, const float* range_grads, double lr, int64_t step) {
  TRIDENT_CHECK(!master_ || range_params == master_, "internal: AdamW with masters updates its masters");
  const AdamWStep hyper{float(lr), float(cfg_.beta1), float(cfg_.beta2), float(cfg_.eps), step};
  k_.adamw_update(range_params, range_grads, m_, v_, end_ - begin_, segments_, hyper,
                  master_ ? working_.patterns + begin_ : nullptr);
  if (master_) copy_fp32_tensors();
}

double clip_gradients(Kernels& kernels, float* grads, int64_t n, double norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  const double coef = max_norm / (norm + 1e-6);
  if (coef >= 1.0) return 1.0;
  kernels.scale(grads, float(coef), n);
  return coef;
}

}  // namespace trident
