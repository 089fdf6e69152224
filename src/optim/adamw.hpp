#pragma once
// AdamW over a flat parameter buffer, exactly as torch.optim.AdamW, with weight decay only on
// tensors of 2 or more dimensions; and global gradient-norm clipping as torch's clip_grad_norm_.
// Under ZeRO an AdamW owns one contiguous range [begin, end) of the flat layout: it keeps moments
// for that range only and updates only those parameters (data_parallel/zero_partition.hpp chooses the range).
#include <cstdint>

#include "core/config.hpp"
#include "kernels.hpp"
#include "model/parameters.hpp"

namespace trident {

class AdamW {
 public:
  // The optimizer of the flat elements [begin, end) of `layout` (end -1: all of it).
  AdamW(const ParameterLayout& layout, Kernels& kernels, const TrainConfig& cfg, int64_t begin = 0, int64_t end = -1);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // One update of the parameters of the range from their gradients (range_params[k] and
  // range_grads[k] belong to element begin + k) with learning rate lr; `step` counts from 1 (bias
  // correction).
  void update(float* range_params, const float* range_grads, double lr, int64_t step);

  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }
  // Moments of elements [begin, end): exp_avg()[k] belongs to element begin + k.
  float* exp_avg() { return m_; }
  float* exp_avg_sq() { return v_; }
  int64_t state_bytes() const { return 2 * (end_ - begin_) * int64_t(sizeof(float)); }

 private:
  const ParameterLayout& layout_;
  Kernels& k_;
  TrainConfig cfg_;
  int64_t begin_, end_;
  float* m_ = nullptr;
  float* v_ = nullptr;
};

// Scales grads so that their global L2 norm is at most max_norm (torch: coef = max_norm/(norm+1e-6),
// applied when < 1). `norm` is the norm before clipping; max_norm 0 turns clipping off.
// Returns the scale applied (1 when not clipped).
double clip_gradients(Kernels& kernels, float* grads, int64_t n, double norm, double max_norm);

}  // namespace trident
