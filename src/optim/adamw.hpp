#pragma once
// AdamW over a flat parameter buffer, exactly as torch.optim.AdamW, with weight decay only on
// tensors of 2 or more dimensions; and global gradient-norm clipping as torch's clip_grad_norm_.
// Under ZeRO an AdamW owns one contiguous range [begin, end) of the flat layout: it keeps moments
// for that range only and updates only those parameters (data_parallel/zero_partition.hpp chooses the range).
// One update is one multi-tensor pass over the range (Kernels::adamw_update with the range's segments).
//
// fp32 masters (train.precision = "bf16" without ZeRO-3): the model computes with a bf16 working copy
// of its parameters (bf16 patterns, model/bf16_working_copy.hpp) while the optimizer keeps the fp32
// master values of its range, the ones checkpoints save; each update writes the new masters and the
// patterns of their bf16 rounding in one pass, then copies the masters of the tensors the copy keeps in
// fp32 (model/fp32_tensors.hpp). (ZeRO-3's partitions are the masters themselves: its
// gathers round; data_parallel/sharded_parameters.hpp.)
#include <cstdint>
#include <vector>

#include "core/config.hpp"
#include "kernels.hpp"
#include "model/fp32_tensors.hpp"
#include "model/parameters.hpp"

namespace trident {

class AdamW {
 public:
  // The optimizer of the flat elements [begin, end) of `layout` (end -1: all of it). With a working copy
  // (the chunk's bf16 patterns, element k is flat element k, and its fp32 tensors) it keeps fp32 masters
  // of that range.
  AdamW(const ParameterLayout& layout, Kernels& kernels, const TrainConfig& cfg, int64_t begin = 0, int64_t end = -1,
        WorkingCopyView working_copy = {});
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // One update of the parameters of the range from their gradients (range_params[k] and
  // range_grads[k] belong to element begin + k; with masters, range_params is masters()) with
  // learning rate lr; `step` counts from 1 (bias correction). With masters, the working copy's range
  // receives the patterns of the updated masters in the same pass, and its fp32 tensors their masters.
  void update(float* range_params, const float* range_grads, double lr, int64_t step);

  // With masters: the working copy's range takes the patterns of the masters as they are (fresh or
  // loaded from a checkpoint), and its fp32 tensors their values. Without masters: nothing.
  void write_working_copy();

  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }
  // Moments of elements [begin, end): exp_avg()[k] belongs to element begin + k.
  float* exp_avg() { return m_; }
  float* exp_avg_sq() { return v_; }
  // fp32 masters of elements [begin, end) (null without masters).
  float* masters() const { return master_; }
  int64_t state_bytes() const { return (master_ ? 3 : 2) * (end_ - begin_) * int64_t(sizeof(float)); }
  // The range's runs of one weight decay, relative to begin (adjacent tensors merged).
  const std::vector<AdamWSegment>& segments() const { return segments_; }

 private:
  const ParameterLayout& layout_;
  Kernels& k_;
  TrainConfig cfg_;
  int64_t begin_, end_;
  std::vector<AdamWSegment> segments_;
  float* m_ = nullptr;
  float* v_ = nullptr;
  float* master_ = nullptr;
  WorkingCopyView working_;  // the chunk's working copy (with masters)
  // The working copy's fp32 tensors in the range take their masters.
  void copy_fp32_tensors();
};

// Scales grads so that their global L2 norm is at most max_norm (torch: coef = max_norm/(norm+1e-6),
// applied when < 1). `norm` is the norm before clipping; max_norm 0 turns clipping off.
// Returns the scale applied (1 when not clipped).
double clip_gradients(Kernels& kernels, float* grads, int64_t n, double norm, double max_norm);

}  // namespace trident
