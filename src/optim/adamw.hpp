#pragma once
// AdamW over a flat parameter buffer, exactly as torch.optim.AdamW, with weight decay only on
// tensors of 2 or more dimensions; and global gradient-norm clipping as torch's clip_grad_norm_.
#include <cstdint>

#include "deck/config.hpp"
#include "kernels.hpp"
#include "model/parameters.hpp"

namespace trident {

class AdamW {
 public:
  AdamW(const ParameterLayout& layout, Kernels& kernels, const TrainConfig& cfg);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // One update with learning rate lr; `step` counts from 1 (bias correction).
  void update(float* params, const float* grads, double lr, int64_t step);

  float* exp_avg() { return m_; }
  float* exp_avg_sq() { return v_; }
  int64_t state_bytes() const { return 2 * layout_.total() * int64_t(sizeof(float)); }

 private:
  const ParameterLayout& layout_;
  Kernels& k_;
  TrainConfig cfg_;
  float* m_ = nullptr;
  float* v_ = nullptr;
};

// Scales grads so that their global L2 norm is at most max_norm (torch: coef = max_norm/(norm+1e-6),
// applied when < 1). `norm` is the norm before clipping; max_norm 0 turns clipping off.
// Returns the scale applied (1 when not clipped).
double clip_gradients(Kernels& kernels, float* grads, int64_t n, double norm, double max_norm);

}  // namespace trident
