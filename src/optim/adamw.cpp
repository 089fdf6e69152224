#include "optim/adamw.hpp"

namespace trident {

AdamW::AdamW(const ParameterLayout& layout, Kernels& kernels, const TrainConfig& cfg)
    : layout_(layout), k_(kernels), cfg_(cfg) {
  m_ = k_.alloc(layout_.total());
  v_ = k_.alloc(layout_.total());
}

AdamW::~AdamW() {
  k_.free(m_);
  k_.free(v_);
}

void AdamW::update(float* params, const float* grads, double lr, int64_t step) {
  for (const auto& t : layout_.tensors()) {
    const float wd = t.decayed() ? float(cfg_.weight_decay) : 0.f;
    k_.adamw_update(params + t.offset, grads + t.offset, m_ + t.offset, v_ + t.offset, t.numel, float(lr),
                    float(cfg_.beta1), float(cfg_.beta2), float(cfg_.eps), wd, step);
  }
}

double clip_gradients(Kernels& kernels, float* grads, int64_t n, double norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  const double coef = max_norm / (norm + 1e-6);
  if (coef >= 1.0) return 1.0;
  kernels.scale(grads, float(coef), n);
  return coef;
}

}  // namespace trident
