#pragma once
// Host launchers of the CUDA backend's kernels, one .cu file per op family (forward and backward
// side by side). Every launcher enqueues on `stream` and returns; none synchronises. Sizes of 0
// launch nothing. Semantics are those of kernels/kernels.hpp (row-major, backward ops accumulate,
// deterministic); the file of each family documents its tiling and reduction order.
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "cuda/bf16.cuh"
#include "kernels.hpp"

namespace trident::cuda {

class DeviceAllocator;

// How a backward op puts its input gradient into dinp: added to it (the Kernels' default) or written over
// it, unread (Kernels::*_backward_overwrite).
enum class GradWrite { Accumulate, Overwrite };

// ---- elementwise.cu ----
void fill(cudaStream_t stream, float* x, float value, int64_t n);
void fill_double(cudaStream_t stream, double* x, double value, int64_t n);
void add(cudaStream_t stream, float* out, const float* a, const float* b, int64_t n);
void accumulate(cudaStream_t stream, float* y, const float* x, int64_t n);
void scale(cudaStream_t stream, float* x, float s, int64_t n);
void clip_coefficient(cudaStream_t stream, float* coef, const double* square_sums, double max_norm);
void scale_by(cudaStream_t stream, float* x, const float* coef, int64_t n);
// *acc += sum x^2 (square) or sum x, in double. `partials` holds kSumMaxBlocks doubles of scratch.
constexpr int kSumMaxBlocks = 1024;
void sum_into(cudaStream_t stream, double* acc, const float* x, int64_t n, bool square, double* partials);

// ---- bf16_storage.cu ----
void round_to_bf16(cudaStream_t stream, float* x, uint16_t* packed, int64_t n);
void unpack_bf16(cudaStream_t stream, float* out, const uint16_t* packed, int64_t n);
void pack_bf16(cudaStream_t stream, const float* x, uint16_t* packed, int64_t n);

// ---- embedding.cu ----
void embedding_forward(cudaStream_t stream, float* out, const int32_t* tokens, const float* wte,
                       int64_t vocab_begin, int64_t vocab_count, int64_t N, int64_t C);
void embedding_forward(cudaStream_t stream, float* out, const int32_t* tokens, const uint16_t* wte,
                       int64_t vocab_begin, int64_t vocab_count, int64_t N, int64_t C);  // bf16 patterns
void embedding_backward(cudaStream_t stream, DeviceAllocator& alloc, float* dwte, const float* dout,
                        const int32_t* tokens, int64_t vocab_begin, int64_t vocab_count, int64_t N, int64_t C);
void position_forward(cudaStream_t stream, float* out, const float* wpe, int64_t B, int64_t T, int64_t C,
                      int64_t t_begin);
void position_backward(cudaStream_t stream, float* dwpe, const float* dout, int64_t B, int64_t T, int64_t C,
                       int64_t t_begin);

// ---- layernorm.cu (and RMSNorm) ----
// rounding: the output as it is (the default) or rounded for bf16 storage in the same pass (bf16.cuh).
void layernorm_forward(cudaStream_t stream, float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int64_t N, int64_t C, float eps,
                       OutputRounding rounding = {});
void layernorm_backward(cudaStream_t stream, DeviceAllocator& alloc, float* dinp, float* dweight, float* dbias,
                        const float* dout, const float* inp, const float* weight, const float* mean,
                        const float* rstd, int64_t N, int64_t C);
void rmsnorm_forward(cudaStream_t stream, float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                     int64_t C, float eps, OutputRounding rounding = {});
// x += residual, then the norm of x (one pass fewer over the sum; Kernels::residual_layernorm_forward).
void residual_layernorm_forward(cudaStream_t stream, float* x, const float* residual, float* out, float* mean,
                                float* rstd, const float* weight, const float* bias, int64_t N, int64_t C, float eps,
                                OutputRounding rounding = {});
void residual_rmsnorm_forward(cudaStream_t stream, float* x, const float* residual, float* out, float* rstd,
                              const float* weight, int64_t N, int64_t C, float eps, OutputRounding rounding = {});
void rmsnorm_backward(cudaStream_t stream, DeviceAllocator& alloc, float* dinp, float* dweight, const float* dout,
                      const float* inp, const float* weight, const float* rstd, int64_t N, int64_t C);

// ---- matmul.cu (the GEMMs are in matmul.cuh's Matmul; these are its own kernels) ----
// out[i, o] = bias[o] (or 0 when bias is null): the IC == 0 forward.
void broadcast_bias(cudaStream_t stream, float* out, const float* bias, int64_t N, int64_t OC);
// out[i, o] += bias[o]: forward bias when the pointer is too unaligned for the cuBLASLt epilogue.
void add_bias(cudaStream_t stream, float* out, const float* bias, int64_t N, int64_t OC);
// dbias[o] += sum_i dout[i, o] (two-pass column sums in double).
void bias_backward(cudaStream_t stream, DeviceAllocator& alloc, float* dbias, const float* dout, int64_t N,
                   int64_t OC);

// ---- attention.cu ----
void attention_forward(cudaStream_t stream, float* out, float* lse, const float* qkv, int64_t B, int64_t T,
                       int64_t NH, int64_t KVH, int64_t HD);
void attention_forward_rows(cudaStream_t stream, float* out, const float* qkv, int64_t B, int64_t T, int64_t NH,
                            int64_t KVH, int64_t HD, int64_t q_begin, int64_t q_count);
void attention_backward(cudaStream_t stream, DeviceAllocator& alloc, float* dqkv, const float* dout,
                        const float* qkv, const float* out, const float* lse, int64_t B, int64_t T, int64_t NH,
                        int64_t KVH, int64_t HD);

// ---- attention_tc.cu: tensor cores (mma.sync, bf16 operands, fp32 accumulation), HD 64 and 128 ----
bool tensor_core_attention_supported(int64_t HD);
void attention_forward_tc(cudaStream_t stream, float* out, float* lse, const float* qkv, int64_t B, int64_t T,
                          int64_t NH, int64_t KVH, int64_t HD);
void attention_backward_tc(cudaStream_t stream, DeviceAllocator& alloc, float* dqkv, const float* dout,
                           const float* qkv, const float* out, const float* lse, int64_t B, int64_t T, int64_t NH,
                           int64_t KVH, int64_t HD, GradWrite write = GradWrite::Accumulate);

// ---- rope.cu ----
// sign +1: rope_forward, -1: rope_backward (the transpose).
void rope_apply(cudaStream_t stream, float* x, const float* table, int64_t B, int64_t T, int64_t NH, int64_t KVH,
                int64_t HD, int64_t t_begin, int64_t t_count, float sign);

// ---- gelu.cu (and SwiGLU) ----
void gelu_forward(cudaStream_t stream, float* out, const float* inp, int64_t n, OutputRounding rounding = {});
void gelu_backward(cudaStream_t stream, float* dinp, const float* inp, const float* dout, int64_t n,
                   GradWrite write = GradWrite::Accumulate);
void swiglu_forward(cudaStream_t stream, float* out, const float* inp, int64_t N, int64_t F,
                    OutputRounding rounding = {});
void swiglu_backward(cudaStream_t stream, float* dinp, const float* inp, const float* dout, int64_t N, int64_t F,
                     GradWrite write = GradWrite::Accumulate);

// ---- crossentropy.cu ----
void xent_row_max(cudaStream_t stream, float* rowmax, const float* logits, int64_t N, int64_t stride,
                  int64_t vocab_count);
void xent_sumexp_target(cudaStream_t stream, float* sumexp, float* target_logit, const float* logits,
                        const float* rowmax, const int32_t* targets, int64_t vocab_begin, int64_t N,
                        int64_t stride, int64_t vocab_count);
void xent_loss_grad(cudaStream_t stream, float* losses, float* logits, const float* rowmax, const float* sumexp,
                    const float* target_logit, const int32_t* targets, int64_t vocab_begin, float dloss_scale,
                    int64_t N, int64_t stride, int64_t vocab_count);

// ---- adamw.cu ----
void adamw_update(cudaStream_t stream, float* param, const float* grad, float* m, float* v, int64_t n,
                  const std::vector<AdamWSegment>& segments, const AdamWStep& hyper, uint16_t* working);

}  // namespace trident::cuda
