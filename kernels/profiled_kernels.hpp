#pragma once
// runtime.op_profile: a Kernels that times every operation of the queue it wraps, the profile of a real
// training step on a machine without a profiler (the GPU machine has no nsys or ncu). Each operation is
// enqueued on the wrapped queue, which is then waited for (fence): its time is the host's wall clock from
// the call to the end of that wait. So operations never overlap while profiled, each time includes one
// wait's latency (fence_seconds(), measured when the profile starts), and a profiled step is slower than
// a plain one by about that much per operation: the table says what each operation costs, not how a plain
// step overlaps them. Operations are keyed by name and shape ("matmul_forward 16384x768x2304": N x IC x
// OC), so the calls of one shape add up across layers; GEMMs and attention also count their FLOPs, so the
// table gives their rate. Allocation, precision and query methods pass
// through untimed; so does communication, which does not go through Kernels.
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "kernels.hpp"

namespace trident {

class ProfiledKernels final : public Kernels {
 public:
  explicit ProfiledKernels(Kernels& inner);

  struct Row {
    std::string op;  // name and shape
    int64_t calls = 0;
    double seconds = 0;
    // Floating-point operations of the calls, for the GEMMs and attention (0 for the rest): a GEMM's
    // 2 N IC OC for each product it computes (forward; backward's dinp and dweight), attention's causal
    // half of its products (forward 2 B NH T^2 HD, backward twice that; its recomputed scores not counted).
    double flops = 0;
  };
  // What was timed since the start or the last reset, by descending time.
  std::vector<Row> rows() const;
  void reset();
  // The latency of one wait for an idle queue (the median of 21), part of every operation's time.
  double fence_seconds() const { return fence_seconds_; }

  std::string name() const override { return inner_.name(); }
  float* alloc(int64_t n) override { return inner_.alloc(n); }
  int32_t* alloc_int(int64_t n) override { return inner_.alloc_int(n); }
  double* alloc_double(int64_t n) override { return inner_.alloc_double(n); }
  uint16_t* alloc_bf16(int64_t n) override { return inner_.alloc_bf16(n); }
  void free(void* p) override { inner_.free(p); }
  void copy_to_device(float* dst, const float* host_src, int64_t n) override;
  void copy_to_host(float* host_dst, const float* src, int64_t n) override;
  void copy_to_device_int(int32_t* dst, const int32_t* host_src, int64_t n) override;
  void copy_to_host_double(double* host_dst, const double* src, int64_t n) override;
  void copy(float* dst, const float* src, int64_t n) override;
  void fill(float* x, float value, int64_t n) override;
  void fill_double(double* x, double value, int64_t n) override;
  void fence() override { inner_.fence(); }

  void add(float* out, const float* a, const float* b, int64_t n) override;
  void accumulate(float* y, const float* x, int64_t n) override;
  void scale(float* x, float s, int64_t n) override;
  void clip_coefficient(float* coef, const double* square_sums, double max_norm) override;
  void scale_by(float* x, const float* coef, int64_t n) override;
  void sum_squares_into(double* acc, const float* x, int64_t n) override;
  void sum_into(double* acc, const float* x, int64_t n) override;
  void round_to_bf16(float* x, uint16_t* packed, int64_t n) override;
  void unpack_bf16(float* out, const uint16_t* packed, int64_t n) override;
  void pack_bf16(const float* x, uint16_t* packed, int64_t n) override;
  void layernorm_forward_rounded(uint16_t* packed, float* out, float* mean, float* rstd, const float* inp,
                                 const float* weight, const float* bias, int64_t N, int64_t C, float eps) override;
  void rmsnorm_forward_rounded(uint16_t* packed, float* out, float* rstd, const float* inp, const float* weight,
                               int64_t N, int64_t C, float eps) override;
  void residual_layernorm_forward_rounded(uint16_t* packed, float* x, const float* residual, float* out, float* mean,
                                          float* rstd, const float* weight, const float* bias, int64_t N, int64_t C,
                                          float eps) override;
  void residual_rmsnorm_forward_rounded(uint16_t* packed, float* x, const float* residual, float* out, float* rstd,
                                        const float* weight, int64_t N, int64_t C, float eps) override;
  void gelu_forward_rounded(uint16_t* packed, float* out, const float* inp, int64_t n) override;
  void swiglu_forward_rounded(uint16_t* packed, float* out, const float* inp, int64_t N, int64_t F) override;

  void embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t vocab_begin,
                         int64_t vocab_count, int64_t N, int64_t C) override;
  void embedding_forward_bf16(float* out, const int32_t* tokens, const uint16_t* wte, int64_t vocab_begin,
                              int64_t vocab_count, int64_t N, int64_t C) override;
  void embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int64_t vocab_begin,
                          int64_t vocab_count, int64_t N, int64_t C) override;
  void position_forward(float* out, const float* wpe, int64_t B, int64_t T, int64_t C, int64_t t_begin) override;
  void position_backward(float* dwpe, const float* dout, int64_t B, int64_t T, int64_t C, int64_t t_begin) override;

  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, int64_t N, int64_t C, float eps) override;
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C) override;
  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C,
                       float eps) override;
  void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                        const float* rstd, int64_t N, int64_t C) override;
  void residual_layernorm_forward(float* x, const float* residual, float* out, float* mean, float* rstd,
                                  const float* weight, const float* bias, int64_t N, int64_t C, float eps) override;
  void residual_rmsnorm_forward(float* x, const float* residual, float* out, float* rstd, const float* weight,
                                int64_t N, int64_t C, float eps) override;

  void set_matmul_precision(MatmulPrecision precision) override { inner_.set_matmul_precision(precision); }
  void matmul_forward(float* out, GemmInput inp, GemmInput weight, const float* bias, int64_t N, int64_t IC,
                      int64_t OC) override;
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, GemmInput inp, GemmInput weight,
                       int64_t N, int64_t IC, int64_t OC) override;
  void matmul_backward_overwrite(float* dinp, float* dweight, float* dbias, const float* dout, GemmInput inp,
                                 GemmInput weight, int64_t N, int64_t IC, int64_t OC) override;

  void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t NH, int64_t KVH,
                         int64_t HD) override;
  void attention_forward_rows(float* out, const float* qkv, int64_t B, int64_t T, int64_t NH, int64_t KVH,
                              int64_t HD, int64_t q_begin, int64_t q_count) override;
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                          int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HD) override;
  void attention_backward_overwrite(float* dqkv, const float* dout, const float* qkv, const float* out,
                                    const float* lse, int64_t B, int64_t T, int64_t NH, int64_t KVH,
                                    int64_t HD) override;
  void rope_forward(float* qkv, const float* table, int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HD,
                    int64_t t_begin, int64_t t_count) override;
  void rope_backward(float* dqkv, const float* table, int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HD,
                     int64_t t_begin, int64_t t_count) override;
  void swiglu_forward(float* out, const float* inp, int64_t N, int64_t F) override;
  void swiglu_backward(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F) override;
  void swiglu_backward_overwrite(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F) override;
  void gelu_forward(float* out, const float* inp, int64_t n) override;
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) override;
  void gelu_backward_overwrite(float* dinp, const float* inp, const float* dout, int64_t n) override;

  void xent_row_max(float* rowmax, const float* logits, int64_t N, int64_t stride, int64_t vocab_count) override;
  void xent_sumexp_target(float* sumexp, float* target_logit, const float* logits, const float* rowmax,
                          const int32_t* targets, int64_t vocab_begin, int64_t N, int64_t stride,
                          int64_t vocab_count) override;
  void xent_loss_grad(float* losses, float* logits, const float* rowmax, const float* sumexp,
                      const float* target_logit, const int32_t* targets, int64_t vocab_begin, float dloss_scale,
                      int64_t N, int64_t stride, int64_t vocab_count) override;
  void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                    const std::vector<AdamWSegment>& segments, const AdamWStep& hyper, uint16_t* working) override;

  double peak_tflops() override { return inner_.peak_tflops(); }
  std::string device_name() const override { return inner_.device_name(); }
  int64_t allocated_bytes() const override { return inner_.allocated_bytes(); }
  int64_t peak_allocated_bytes() const override { return inner_.peak_allocated_bytes(); }
  bool host_memory() const override { return inner_.host_memory(); }

 private:
  // Runs `enqueue` (one call into inner_), waits for the queue and adds the time to `op`.
  template <class F>
  void timed(const std::string& op, F&& enqueue, double flops = 0);

  Kernels& inner_;
  std::map<std::string, Row> rows_;
  double fence_seconds_ = 0;
};

}  // namespace trident
