#pragma once
// KokkosKernels<ExecSpace>: the Kernels interface on one Kokkos execution space. Each method wraps
// the raw pointers in unmanaged Views of ExecSpace::memory_space and calls the templated kernels of
// the per-concern headers. The object owns a workspace (attention tiles, reduction partials)
// that grows on demand and is never shrunk.
#include <algorithm>
#include <string>
#include <unordered_map>

#include "core/error.hpp"
#include "kernel_checks.hpp"
#include "kernels.hpp"
#include "kokkos/adamw.hpp"
#include "kokkos/attention.hpp"
#include "kokkos/bf16_storage.hpp"
#include "kokkos/common.hpp"
#include "kokkos/crossentropy.hpp"
#include "kokkos/elementwise.hpp"
#include "kokkos/embedding.hpp"
#include "kokkos/gelu.hpp"
#include "kokkos/layernorm.hpp"
#include "kokkos/matmul.hpp"
#include "kokkos/rope.hpp"

namespace trident {

namespace kk {
// Measured single-process sgemm rate (TFLOP/s) on a GPT-sized shape: the CPU's achievable peak
// used for MFU when runtime.peak_tflops is 0. Takes about 0.1 s.
double measure_sgemm_tflops();
}  // namespace kk

template <class ExecSpace>
class KokkosKernels final : public Kernels {
 public:
  using ES = ExecSpace;
  using MemSpace = typename ES::memory_space;

  KokkosKernels() = default;
  explicit KokkosKernels(const ES& space) : space_(space) {}
  ~KokkosKernels() override { space_.fence(); }

  std::string name() const override { return std::string("kokkos-") + ES::name(); }
  bool host_memory() const override { return Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible; }

  // ---- memory ----
  float* alloc(int64_t n) override { return static_cast<float*>(alloc_zeroed(n * int64_t(sizeof(float)))); }
  int32_t* alloc_int(int64_t n) override {
    return static_cast<int32_t*>(alloc_zeroed(n * int64_t(sizeof(int32_t))));
  }
  double* alloc_double(int64_t n) override {
    return static_cast<double*>(alloc_zeroed(n * int64_t(sizeof(double))));
  }
  uint16_t* alloc_bf16(int64_t n) override {
    return static_cast<uint16_t*>(alloc_zeroed(n * int64_t(sizeof(uint16_t))));
  }
  void free(void* p) override {
    if (!p) return;
    auto it = sizes_.find(p);
    if (it != sizes_.end()) {
      allocated_ -= it->second;
      sizes_.erase(it);
    }
    Kokkos::kokkos_free<MemSpace>(p);
  }
  void copy_to_device(float* dst, const float* host_src, int64_t n) override {
    Kokkos::deep_copy(kk::vec<ES>(dst, n), HostCVec<float>(host_src, n));
  }
  void copy_to_host(float* host_dst, const float* src, int64_t n) override {
    Kokkos::deep_copy(HostVec<float>(host_dst, n), kk::cvec<ES>(src, n));
  }
  void copy_to_device_int(int32_t* dst, const int32_t* host_src, int64_t n) override {
    Kokkos::deep_copy(kk::vec<ES>(dst, n), HostCVec<int32_t>(host_src, n));
  }
  void copy_to_host_double(double* host_dst, const double* src, int64_t n) override {
    Kokkos::deep_copy(HostVec<double>(host_dst, n), kk::cvec<ES>(src, n));
  }
  void copy(float* dst, const float* src, int64_t n) override {
    Kokkos::deep_copy(kk::vec<ES>(dst, n), kk::cvec<ES>(src, n));
  }
  void fill(float* x, float value, int64_t n) override { kk::fill(space_, kk::vec<ES>(x, n), value); }
  void fill_double(double* x, double value, int64_t n) override {
    kk::fill(space_, kk::Vec<ES, double>(x, n), value);
  }
  void fence() override { space_.fence(); }

  // ---- elementwise ----
  void add(float* out, const float* a, const float* b, int64_t n) override {
    kk::add(space_, kk::vec<ES>(out, n), kk::cvec<ES>(a, n), kk::cvec<ES>(b, n));
  }
  void accumulate(float* y, const float* x, int64_t n) override {
    kk::accumulate(space_, kk::vec<ES>(y, n), kk::cvec<ES>(x, n));
  }
  void scale(float* x, float s, int64_t n) override { kk::scale(space_, kk::vec<ES>(x, n), s); }
  void clip_coefficient(float* coef, const double* square_sums, double max_norm) override {
    kk::clip_coefficient(space_, kk::vec<ES>(coef, 1), kk::CVec<ES, double>(square_sums, 2), max_norm);
  }
  void scale_by(float* x, const float* coef, int64_t n) override {
    kk::scale_by(space_, kk::vec<ES>(x, n), kk::cvec<ES>(coef, 1));
  }
  void sum_squares_into(double* acc, const float* x, int64_t n) override {
    kk::sum_into(space_, kk::Vec<ES, double>(acc, 1), kk::cvec<ES>(x, n), double_workspace(kk::sum_chunks(n)), true);
  }
  void sum_into(double* acc, const float* x, int64_t n) override {
    kk::sum_into(space_, kk::Vec<ES, double>(acc, 1), kk::cvec<ES>(x, n), double_workspace(kk::sum_chunks(n)), false);
  }

  // ---- embeddings ----
  void embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t vocab_begin,
                         int64_t vocab_count, int64_t N, int64_t C) override {
    kk::embedding_forward(space_, kk::mat<ES>(out, N, C), kk::cvec<ES>(tokens, N),
                          kk::CVec<ES>(wte, vocab_count * C), vocab_count, vocab_begin);
  }
  void embedding_forward_bf16(float* out, const int32_t* tokens, const uint16_t* wte, int64_t vocab_begin,
                              int64_t vocab_count, int64_t N, int64_t C) override {
    kk::embedding_forward(space_, kk::mat<ES>(out, N, C), kk::cvec<ES>(tokens, N),
                          kk::CVec<ES, uint16_t>(wte, vocab_count * C), vocab_count, vocab_begin);
  }
  void embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int64_t vocab_begin,
                          int64_t vocab_count, int64_t N, int64_t C) override {
    kk::embedding_backward(space_, kk::mat<ES>(dwte, vocab_count, C), kk::cmat<ES>(dout, N, C),
                           kk::cvec<ES>(tokens, N), vocab_begin);
  }
  void position_forward(float* out, const float* wpe, int64_t B, int64_t T, int64_t C,
                        int64_t t_begin) override {
    kk::position_forward(space_, kk::mat<ES>(out, B * T, C), kk::cmat<ES>(wpe, t_begin + T, C), T, t_begin);
  }
  void position_backward(float* dwpe, const float* dout, int64_t B, int64_t T, int64_t C,
                         int64_t t_begin) override {
    kk::position_backward(space_, kk::mat<ES>(dwpe, t_begin + T, C), kk::cmat<ES>(dout, B * T, C), B, T,
                          t_begin);
  }

  // ---- LayerNorm ----
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, int64_t N, int64_t C, float eps) override {
    kk::layernorm_forward(space_, kk::mat<ES>(out, N, C), kk::vec<ES>(mean, N), kk::vec<ES>(rstd, N),
                          kk::cmat<ES>(inp, N, C), kk::CMat<ES>(), kk::cvec<ES>(weight, C), kk::cvec<ES>(bias, C), eps);
  }
  void residual_layernorm_forward(float* x, const float* residual, float* out, float* mean, float* rstd,
                                  const float* weight, const float* bias, int64_t N, int64_t C, float eps) override {
    kk::layernorm_forward(space_, kk::mat<ES>(out, N, C), kk::vec<ES>(mean, N), kk::vec<ES>(rstd, N),
                          kk::mat<ES>(x, N, C), kk::cmat<ES>(residual, N, C), kk::cvec<ES>(weight, C),
                          kk::cvec<ES>(bias, C), eps);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, const float* mean, const float* rstd, int64_t N,
                          int64_t C) override {
    kk::layernorm_backward(space_, kk::mat<ES>(dinp, N, C), kk::vec<ES>(dweight, C), kk::vec<ES>(dbias, C),
                           kk::cmat<ES>(dout, N, C), kk::cmat<ES>(inp, N, C), kk::cvec<ES>(weight, C),
                           kk::cvec<ES>(mean, N), kk::cvec<ES>(rstd, N));
  }

  // ---- RMSNorm ----
  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C,
                       float eps) override {
    kk::rmsnorm_forward(space_, kk::mat<ES>(out, N, C), kk::vec<ES>(rstd, N), kk::cmat<ES>(inp, N, C),
                        kk::CMat<ES>(), kk::cvec<ES>(weight, C), eps);
  }
  void residual_rmsnorm_forward(float* x, const float* residual, float* out, float* rstd, const float* weight,
                                int64_t N, int64_t C, float eps) override {
    kk::rmsnorm_forward(space_, kk::mat<ES>(out, N, C), kk::vec<ES>(rstd, N), kk::mat<ES>(x, N, C),
                        kk::cmat<ES>(residual, N, C), kk::cvec<ES>(weight, C), eps);
  }
  void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                        const float* rstd, int64_t N, int64_t C) override {
    kk::rmsnorm_backward(space_, kk::mat<ES>(dinp, N, C), kk::vec<ES>(dweight, C), kk::cmat<ES>(dout, N, C),
                         kk::cmat<ES>(inp, N, C), kk::cvec<ES>(weight, C), kk::cvec<ES>(rstd, N));
  }

  // ---- bf16 storage ----
  void round_to_bf16(float* x, uint16_t* packed, int64_t n) override {
    kk::round_to_bf16(space_, kk::vec<ES>(x, n), kk::Vec<ES, uint16_t>(packed, packed ? n : 0));
  }
  void unpack_bf16(float* out, const uint16_t* packed, int64_t n) override {
    kk::unpack_bf16(space_, kk::vec<ES>(out, n), kk::CVec<ES, uint16_t>(packed, n));
  }
  void pack_bf16(const float* x, uint16_t* packed, int64_t n) override {
    kk::pack_bf16(space_, kk::cvec<ES>(x, n), kk::Vec<ES, uint16_t>(packed, n));
  }

  // ---- matmul ----
  // Below fp32, each GEMM reads rounded copies of its operands (kk::round_operand) from the workspace;
  // the bias and its gradient use the unrounded values. A wide GEMM (the LM head) runs in panels of
  // output features (rounded_gemm_panel, core/matmul_precision.hpp), so the workspace holds one panel of
  // the weight and of dout (or of forward's product) besides inp's copy, not the whole of them.
  void set_matmul_precision(MatmulPrecision precision) override { matmul_precision_ = precision; }
  void matmul_forward(float* out, GemmInput inp, GemmInput weight, const float* bias, int64_t N, int64_t IC,
                      int64_t OC) override {
    const int dropped = kk::dropped_mantissa_bits(matmul_precision_);
    if (!dropped) {  // fp32 GEMMs; an input given as patterns alone is widened into the workspace
      const int64_t nx = widened_size(inp, N * IC);
      float* ws = float_workspace(nx + widened_size(weight, OC * IC)).data();
      return kk::matmul_forward(space_, kk::mat<ES>(out, N, OC), kk::cmat<ES>(values_of(inp, N * IC, ws), N, IC),
                                kk::cmat<ES>(values_of(weight, OC * IC, ws + nx), OC, IC),
                                kk::cvec<ES>(bias, bias ? OC : 0));
    }
    const int64_t P = rounded_gemm_panel(N, IC, OC);
    const bool whole = P == OC;
    // The workspace: inp's copy, a panel of the weight's rows, (panels) the panel's product.
    float* ws = float_workspace(N * IC + P * IC + (whole ? 0 : N * P)).data();
    const float* r_inp = gemm_operand(inp, N * IC, ws, dropped);
    float* product = whole ? out : ws + N * IC + P * IC;
    for (int64_t o0 = 0; o0 < OC; o0 += P) {
      const int64_t n = std::min(P, OC - o0);
      kk::matmul_forward(space_, kk::mat<ES>(product, N, n), kk::cmat<ES>(r_inp, N, IC),
                         kk::cmat<ES>(gemm_operand(weight.at(o0 * IC), n * IC, ws + N * IC, dropped), n, IC),
                         kk::cvec<ES>(bias ? bias + o0 : nullptr, bias ? n : 0));
      if (!whole) kk::put_columns(space_, kk::mat<ES>(out, N, OC), kk::cmat<ES>(product, N, n), o0);
    }
  }
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, GemmInput inp,
                       GemmInput weight, int64_t N, int64_t IC, int64_t OC) override {
    if (dbias) matmul_backward_unrounded(nullptr, nullptr, dbias, dout, nullptr, nullptr, N, IC, OC);
    const int dropped = kk::dropped_mantissa_bits(matmul_precision_);
    if (!dropped) {  // fp32 GEMMs, as forward
      const int64_t nx = dweight ? widened_size(inp, N * IC) : 0;
      float* ws = float_workspace(nx + (dinp ? widened_size(weight, OC * IC) : 0)).data();
      return matmul_backward_unrounded(dinp, dweight, nullptr, dout, dweight ? values_of(inp, N * IC, ws) : nullptr,
                                       dinp ? values_of(weight, OC * IC, ws + nx) : nullptr, N, IC, OC);
    }
    const int64_t P = rounded_gemm_panel(N, IC, OC);
    // The workspace: inp's copy (for dweight), a panel of dout's columns, a panel of the weight's rows (for dinp).
    float* ws = float_workspace((dweight ? N * IC : 0) + N * P + (dinp ? P * IC : 0)).data();
    const float* r_inp = dweight ? gemm_operand(inp, N * IC, ws, dropped) : nullptr;
    float* dout_panel = ws + (dweight ? N * IC : 0);
    for (int64_t o0 = 0; o0 < OC; o0 += P) {
      const int64_t n = std::min(P, OC - o0);
      if (P == OC)
        operand(dout, N * OC, dout_panel, dropped);
      else
        kk::round_columns(space_, kk::mat<ES>(dout_panel, N, n), kk::cmat<ES>(dout, N, OC), o0, dropped);
      const float* r_weight = dinp ? gemm_operand(weight.at(o0 * IC), n * IC, dout_panel + N * P, dropped) : nullptr;
      matmul_backward_unrounded(dinp, dweight ? dweight + o0 * IC : nullptr, nullptr, dout_panel, r_inp, r_weight, N,
                                IC, n);
    }
  }

  // ---- attention ----
  // bf16 (attention_follows_bf16): q, k, v and dout are read from rounded copies in the workspace,
  // after the tiles' scratch; P and dS are rounded inside (kk::attention_*'s `dropped`). The rows of
  // incremental decoding stay fp32 (kernels.hpp).
  void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t NH, int64_t KVH,
                         int64_t HD) override {
    check_attention_heads("attention_forward", NH, KVH);
    const int64_t C = NH * HD, RS = (NH + 2 * KVH) * HD;
    const int dropped = attention_dropped_bits(HD);
    const int64_t scratch = kk::attention_forward_workspace(B, T, NH, HD);
    kk::Vec<ES> ws = float_workspace(scratch + (dropped ? B * T * RS : 0));
    const float* q = operand(qkv, B * T * RS, ws.data() + scratch, dropped);
    kk::attention_forward(space_, kk::vec<ES>(out, B * T * C), kk::vec<ES>(lse, B * NH * T),
                          kk::cvec<ES>(q, B * T * RS), ws, B, T, NH, KVH, HD, dropped);
  }
  void attention_forward_rows(float* out, const float* qkv, int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HD,
                              int64_t q_begin, int64_t q_count) override {
    TRIDENT_CHECK(attention_rows_valid(T, q_begin, q_count), "attention_forward_rows: rows [{}, {}) outside [0, {})",
                  q_begin, q_begin + q_count, T);
    check_attention_heads("attention_forward_rows", NH, KVH);
    kk::attention_forward_rows(space_, out, nullptr, qkv,
                               float_workspace(kk::attention_forward_workspace(B, T, NH, HD)), B, T, NH, KVH, HD,
                               q_begin, q_count);
  }
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                          int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HD) override {
    check_attention_heads("attention_backward", NH, KVH);
    const int64_t C = NH * HD, RS = (NH + 2 * KVH) * HD;
    const int dropped = attention_dropped_bits(HD);
    const int64_t scratch = kk::attention_backward_workspace(B, T, NH, HD);
    kk::Vec<ES> ws = float_workspace(scratch + (dropped ? B * T * (RS + C) : 0));
    const float* q = operand(qkv, B * T * RS, ws.data() + scratch, dropped);
    const float* dy = operand(dout, B * T * C, ws.data() + scratch + B * T * RS, dropped);
    kk::attention_backward(space_, kk::vec<ES>(dqkv, B * T * RS), kk::cvec<ES>(dy, B * T * C),
                           kk::cvec<ES>(q, B * T * RS), kk::cvec<ES>(out, B * T * C), kk::cvec<ES>(lse, B * NH * T),
                           ws, B, T, NH, KVH, HD, dropped);
  }

  // ---- RoPE ----
  void rope_forward(float* qkv, const float* table, int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HD,
                    int64_t t_begin, int64_t t_count) override {
    check_rope("rope_forward", T, NH, KVH, HD, t_begin, t_count);
    kk::rope_apply(space_, qkv, table, B, T, NH, KVH, HD, t_begin, t_count, 1.0f);
  }
  void rope_backward(float* dqkv, const float* table, int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HD,
                     int64_t t_begin, int64_t t_count) override {
    check_rope("rope_backward", T, NH, KVH, HD, t_begin, t_count);
    kk::rope_apply(space_, dqkv, table, B, T, NH, KVH, HD, t_begin, t_count, -1.0f);
  }

  // ---- SwiGLU ----
  void swiglu_forward(float* out, const float* inp, int64_t N, int64_t F) override {
    kk::swiglu_forward(space_, kk::mat<ES>(out, N, F), kk::cmat<ES>(inp, N, 2 * F));
  }
  void swiglu_backward(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F) override {
    kk::swiglu_backward(space_, kk::mat<ES>(dinp, N, 2 * F), kk::cmat<ES>(inp, N, 2 * F), kk::cmat<ES>(dout, N, F));
  }

  // ---- GELU ----
  void gelu_forward(float* out, const float* inp, int64_t n) override {
    kk::gelu_forward(space_, kk::vec<ES>(out, n), kk::cvec<ES>(inp, n));
  }
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) override {
    kk::gelu_backward(space_, kk::vec<ES>(dinp, n), kk::cvec<ES>(inp, n), kk::cvec<ES>(dout, n));
  }

  // ---- cross-entropy ----
  void xent_row_max(float* rowmax, const float* logits, int64_t N, int64_t stride, int64_t vocab_count) override {
    kk::xent_row_max(space_, kk::vec<ES>(rowmax, N), kk::cmat<ES>(logits, N, stride), vocab_count);
  }
  void xent_sumexp_target(float* sumexp, float* target_logit, const float* logits, const float* rowmax,
                          const int32_t* targets, int64_t vocab_begin, int64_t N, int64_t stride,
                          int64_t vocab_count) override {
    kk::xent_sumexp_target(space_, kk::vec<ES>(sumexp, N), kk::vec<ES>(target_logit, N),
                           kk::cmat<ES>(logits, N, stride), kk::cvec<ES>(rowmax, N), kk::cvec<ES>(targets, N),
                           vocab_begin, vocab_count);
  }
  void xent_loss_grad(float* losses, float* logits, const float* rowmax, const float* sumexp,
                      const float* target_logit, const int32_t* targets, int64_t vocab_begin, float dloss_scale,
                      int64_t N, int64_t stride, int64_t vocab_count) override {
    kk::xent_loss_grad(space_, kk::vec<ES>(losses, N), kk::mat<ES>(logits, N, stride), kk::cvec<ES>(rowmax, N),
                       kk::cvec<ES>(sumexp, N), kk::cvec<ES>(target_logit, N), kk::cvec<ES>(targets, N),
                       vocab_begin, dloss_scale, vocab_count);
  }

  // ---- AdamW ----
  void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                    const std::vector<AdamWSegment>& segments, const AdamWStep& hyper, uint16_t* working) override {
    check_adamw_segments(segments, n);
    kk::adamw_update(space_, kk::vec<ES>(param, n), kk::cvec<ES>(grad, n), kk::vec<ES>(m, n), kk::vec<ES>(v, n),
                     segments, hyper, working);
  }

  // ---- the device ----
  double peak_tflops() override { return kk::measure_sgemm_tflops(); }
  int64_t allocated_bytes() const override { return allocated_; }
  int64_t peak_allocated_bytes() const override { return peak_allocated_; }

 private:
  template <class T>
  using HostVec = Kokkos::View<T*, Kokkos::HostSpace, kk::Unmanaged>;
  template <class T>
  using HostCVec = Kokkos::View<const T*, Kokkos::HostSpace, kk::Unmanaged>;

  void* alloc_zeroed(int64_t bytes) {
    // At least one word, so that a zero-size request still yields a distinct, freeable pointer.
    const int64_t words = bytes > 0 ? (bytes + 7) / 8 * 2 : 2;  // whole doubles: alloc_double needs 8-byte units
    void* p = Kokkos::kokkos_malloc<MemSpace>("trident::Kernels::alloc", size_t(words) * 4);
    sizes_[p] = words * 4;
    allocated_ += words * 4;
    peak_allocated_ = std::max(peak_allocated_, allocated_);
    kk::fill(space_, kk::vec<ES>(static_cast<float*>(p), words), 0.0f);  // all-zero bits, int or float
    space_.fence();
    return p;
  }

  // inp is read for dweight only, weight for dinp only (either may be null when its gradient is not wanted).
  void matmul_backward_unrounded(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                 const float* weight, int64_t N, int64_t IC, int64_t OC) {
    kk::matmul_backward(space_, kk::mat<ES>(dinp, dinp ? N : 0, IC), kk::mat<ES>(dweight, dweight ? OC : 0, IC),
                        kk::vec<ES>(dbias, dbias ? OC : 0), kk::cmat<ES>(dout, N, OC),
                        kk::cmat<ES>(inp, inp ? N : 0, IC), kk::cmat<ES>(weight, weight ? OC : 0, IC));
  }
  // A GEMM input for the fp32 GEMMs: its values, or (given as patterns alone) its patterns widened
  // into copy, which holds widened_size floats.
  static int64_t widened_size(const GemmInput& x, int64_t n) { return x.values ? 0 : n; }
  const float* values_of(const GemmInput& x, int64_t n, float* copy) {
    if (x.values) return x.values;
    unpack_bf16(copy, x.bf16, n);
    return copy;
  }
  // A GEMM input rounded to `dropped` > 0 bits into copy: its patterns widened (a bf16 number is its own
  // rounding to bf16 or TF32; the same bits as rounding its values), else its values rounded.
  const float* gemm_operand(const GemmInput& x, int64_t n, float* copy, int dropped) {
    if (!x.bf16) return operand(x.values, n, copy, dropped);
    unpack_bf16(copy, x.bf16, n);
    return copy;
  }
  // x itself (dropped == 0), or its n elements rounded into copy.
  // The bits attention's operands drop: bf16's where attention_follows_bf16 (kernels.hpp), else none.
  int attention_dropped_bits(int64_t HD) const {
    return attention_follows_bf16(matmul_precision_, HD) ? kk::dropped_mantissa_bits(matmul_precision_) : 0;
  }

  const float* operand(const float* x, int64_t n, float* copy, int dropped) {
    if (!dropped) return x;
    kk::round_operand(space_, kk::vec<ES>(copy, n), kk::cvec<ES>(x, n), dropped);
    return copy;
  }

  kk::Vec<ES> float_workspace(int64_t n) {
    if (int64_t(ws_.extent(0)) < n) {
      ws_ = Kokkos::View<float*, MemSpace>();  // free the old one first
      ws_ = Kokkos::View<float*, MemSpace>(Kokkos::ViewAllocateWithoutInitializing("trident::workspace"), n);
    }
    return kk::Vec<ES>(ws_.data(), n);
  }
  kk::Vec<ES, double> double_workspace(int64_t n) {
    if (int64_t(ws_double_.extent(0)) < n) {
      ws_double_ = Kokkos::View<double*, MemSpace>();
      ws_double_ = Kokkos::View<double*, MemSpace>(
          Kokkos::ViewAllocateWithoutInitializing("trident::workspace_double"), n);
    }
    return kk::Vec<ES, double>(ws_double_.data(), n);
  }

  ES space_{};
  std::unordered_map<void*, int64_t> sizes_;  // bytes of each live allocation, for the account
  int64_t allocated_ = 0, peak_allocated_ = 0;
  MatmulPrecision matmul_precision_ = MatmulPrecision::FP32;
  Kokkos::View<float*, MemSpace> ws_;
  Kokkos::View<double*, MemSpace> ws_double_;
};

}  // namespace trident
