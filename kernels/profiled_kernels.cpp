// runtime.op_profile's Kernels (profiled_kernels.hpp): every operation forwarded, then waited for and timed.
#include "profiled_kernels.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace trident {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string matrix(int64_t n, int64_t c) { return fmt::format("{}x{}", n, c); }
std::string gemm(int64_t n, int64_t ic, int64_t oc) { return fmt::format("{}x{}x{}", n, ic, oc); }
std::string heads(int64_t b, int64_t t, int64_t nh, int64_t kvh, int64_t hd) {
  return fmt::format("B{} T{} NH{} KVH{} HD{}", b, t, nh, kvh, hd);
}

double gemm_flops(int64_t n, int64_t ic, int64_t oc) { return 2.0 * double(n) * double(ic) * double(oc); }
// The causal half of attention's two products, 2 B NH T^2 HD each in full.
double causal_attention_flops(int64_t b, int64_t t, int64_t nh, int64_t hd) {
  return 2.0 * double(b) * double(nh) * double(t) * double(t) * double(hd);
}

}  // namespace

ProfiledKernels::ProfiledKernels(Kernels& inner) : inner_(inner) {
  constexpr int kFences = 21;
  inner_.fence();
  std::vector<double> waits;
  for (int i = 0; i < kFences; ++i) {
    const auto t0 = Clock::now();
    inner_.fence();
    waits.push_back(seconds_since(t0));
  }
  std::nth_element(waits.begin(), waits.begin() + kFences / 2, waits.end());
  fence_seconds_ = waits[kFences / 2];
}

std::vector<ProfiledKernels::Row> ProfiledKernels::rows() const {
  std::vector<Row> out;
  for (const auto& [op, row] : rows_) out.push_back(row);
  std::stable_sort(out.begin(), out.end(), [](const Row& a, const Row& b) { return a.seconds > b.seconds; });
  return out;
}

void ProfiledKernels::reset() { rows_.clear(); }

template <class F>
void ProfiledKernels::timed(const std::string& op, F&& enqueue, double flops) {
  const auto t0 = Clock::now();
  enqueue();
  inner_.fence();
  Row& row = rows_[op];
  row.op = op;
  row.calls += 1;
  row.seconds += seconds_since(t0);
  row.flops += flops;
}

void ProfiledKernels::copy_to_device(float* dst, const float* host_src, int64_t n) {
  timed(fmt::format("copy_to_device {}", n), [&] { inner_.copy_to_device(dst, host_src, n); });
}

void ProfiledKernels::copy_to_host(float* host_dst, const float* src, int64_t n) {
  timed(fmt::format("copy_to_host {}", n), [&] { inner_.copy_to_host(host_dst, src, n); });
}

void ProfiledKernels::copy_to_device_int(int32_t* dst, const int32_t* host_src, int64_t n) {
  timed(fmt::format("copy_to_device_int {}", n), [&] { inner_.copy_to_device_int(dst, host_src, n); });
}

void ProfiledKernels::copy_to_host_double(double* host_dst, const double* src, int64_t n) {
  timed(fmt::format("copy_to_host_double {}", n), [&] { inner_.copy_to_host_double(host_dst, src, n); });
}

void ProfiledKernels::copy(float* dst, const float* src, int64_t n) {
  timed(fmt::format("copy {}", n), [&] { inner_.copy(dst, src, n); });
}

void ProfiledKernels::fill(float* x, float value, int64_t n) {
  timed(fmt::format("fill {}", n), [&] { inner_.fill(x, value, n); });
}

void ProfiledKernels::fill_double(double* x, double value, int64_t n) {
  timed(fmt::format("fill_double {}", n), [&] { inner_.fill_double(x, value, n); });
}

void ProfiledKernels::add(float* out, const float* a, const float* b, int64_t n) {
  timed(fmt::format("add {}", n), [&] { inner_.add(out, a, b, n); });
}

void ProfiledKernels::accumulate(float* y, const float* x, int64_t n) {
  timed(fmt::format("accumulate {}", n), [&] { inner_.accumulate(y, x, n); });
}

void ProfiledKernels::scale(float* x, float s, int64_t n) {
  timed(fmt::format("scale {}", n), [&] { inner_.scale(x, s, n); });
}

void ProfiledKernels::clip_coefficient(float* coef, const double* square_sums, double max_norm) {
  timed("clip_coefficient", [&] { inner_.clip_coefficient(coef, square_sums, max_norm); });
}

void ProfiledKernels::scale_by(float* x, const float* coef, int64_t n) {
  timed(fmt::format("scale_by {}", n), [&] { inner_.scale_by(x, coef, n); });
}

void ProfiledKernels::sum_squares_into(double* acc, const float* x, int64_t n) {
  timed(fmt::format("sum_squares_into {}", n), [&] { inner_.sum_squares_into(acc, x, n); });
}

void ProfiledKernels::sum_into(double* acc, const float* x, int64_t n) {
  timed(fmt::format("sum_into {}", n), [&] { inner_.sum_into(acc, x, n); });
}

void ProfiledKernels::round_to_bf16(float* x, uint16_t* packed, int64_t n) {
  timed(fmt::format("round_to_bf16 {}", n), [&] { inner_.round_to_bf16(x, packed, n); });
}

void ProfiledKernels::unpack_bf16(float* out, const uint16_t* packed, int64_t n) {
  timed(fmt::format("unpack_bf16 {}", n), [&] { inner_.unpack_bf16(out, packed, n); });
}

void ProfiledKernels::pack_bf16(const float* x, uint16_t* packed, int64_t n) {
  timed(fmt::format("pack_bf16 {}", n), [&] { inner_.pack_bf16(x, packed, n); });
}

void ProfiledKernels::layernorm_forward_rounded(uint16_t* packed, float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias, int64_t N, int64_t C, float eps) {
  timed("layernorm_forward_rounded " + matrix(N, C), [&] { inner_.layernorm_forward_rounded(packed, out, mean, rstd, inp, weight, bias, N, C, eps); });
}

void ProfiledKernels::rmsnorm_forward_rounded(uint16_t* packed, float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C, float eps) {
  timed("rmsnorm_forward_rounded " + matrix(N, C), [&] { inner_.rmsnorm_forward_rounded(packed, out, rstd, inp, weight, N, C, eps); });
}

void ProfiledKernels::residual_layernorm_forward_rounded(uint16_t* packed, float* x, const float* residual, float* out, float* mean, float* rstd, const float* weight, const float* bias, int64_t N, int64_t C, float eps) {
  timed("residual_layernorm_forward_rounded " + matrix(N, C), [&] { inner_.residual_layernorm_forward_rounded(packed, x, residual, out, mean, rstd, weight, bias, N, C, eps); });
}

void ProfiledKernels::residual_rmsnorm_forward_rounded(uint16_t* packed, float* x, const float* residual, float* out, float* rstd, const float* weight, int64_t N, int64_t C, float eps) {
  timed("residual_rmsnorm_forward_rounded " + matrix(N, C), [&] { inner_.residual_rmsnorm_forward_rounded(packed, x, residual, out, rstd, weight, N, C, eps); });
}

void ProfiledKernels::gelu_forward_rounded(uint16_t* packed, float* out, const float* inp, int64_t n) {
  timed(fmt::format("gelu_forward_rounded {}", n), [&] { inner_.gelu_forward_rounded(packed, out, inp, n); });
}

void ProfiledKernels::swiglu_forward_rounded(uint16_t* packed, float* out, const float* inp, int64_t N, int64_t F) {
  timed("swiglu_forward_rounded " + matrix(N, F), [&] { inner_.swiglu_forward_rounded(packed, out, inp, N, F); });
}

void ProfiledKernels::embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t vocab_begin, int64_t vocab_count, int64_t N, int64_t C) {
  timed("embedding_forward " + matrix(N, C), [&] { inner_.embedding_forward(out, tokens, wte, vocab_begin, vocab_count, N, C); });
}

void ProfiledKernels::embedding_forward_bf16(float* out, const int32_t* tokens, const uint16_t* wte, int64_t vocab_begin, int64_t vocab_count, int64_t N, int64_t C) {
  timed("embedding_forward_bf16 " + matrix(N, C), [&] { inner_.embedding_forward_bf16(out, tokens, wte, vocab_begin, vocab_count, N, C); });
}

void ProfiledKernels::embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int64_t vocab_begin, int64_t vocab_count, int64_t N, int64_t C) {
  timed("embedding_backward " + matrix(N, C), [&] { inner_.embedding_backward(dwte, dout, tokens, vocab_begin, vocab_count, N, C); });
}

void ProfiledKernels::position_forward(float* out, const float* wpe, int64_t B, int64_t T, int64_t C, int64_t t_begin) {
  timed("position_forward " + matrix(B * T, C), [&] { inner_.position_forward(out, wpe, B, T, C, t_begin); });
}

void ProfiledKernels::position_backward(float* dwpe, const float* dout, int64_t B, int64_t T, int64_t C, int64_t t_begin) {
  timed("position_backward " + matrix(B * T, C), [&] { inner_.position_backward(dwpe, dout, B, T, C, t_begin); });
}

void ProfiledKernels::layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias, int64_t N, int64_t C, float eps) {
  timed("layernorm_forward " + matrix(N, C), [&] { inner_.layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps); });
}

void ProfiledKernels::layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C) {
  timed("layernorm_backward " + matrix(N, C), [&] { inner_.layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C); });
}

void ProfiledKernels::rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C, float eps) {
  timed("rmsnorm_forward " + matrix(N, C), [&] { inner_.rmsnorm_forward(out, rstd, inp, weight, N, C, eps); });
}

void ProfiledKernels::rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight, const float* rstd, int64_t N, int64_t C) {
  timed("rmsnorm_backward " + matrix(N, C), [&] { inner_.rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C); });
}

void ProfiledKernels::residual_layernorm_forward(float* x, const float* residual, float* out, float* mean, float* rstd, const float* weight, const float* bias, int64_t N, int64_t C, float eps) {
  timed("residual_layernorm_forward " + matrix(N, C), [&] { inner_.residual_layernorm_forward(x, residual, out, mean, rstd, weight, bias, N, C, eps); });
}

void ProfiledKernels::residual_rmsnorm_forward(float* x, const float* residual, float* out, float* rstd, const float* weight, int64_t N, int64_t C, float eps) {
  timed("residual_rmsnorm_forward " + matrix(N, C), [&] { inner_.residual_rmsnorm_forward(x, residual, out, rstd, weight, N, C, eps); });
}

void ProfiledKernels::matmul_forward(float* out, GemmInput inp, GemmInput weight, const float* bias, int64_t N, int64_t IC, int64_t OC) {
  timed("matmul_forward " + gemm(N, IC, OC), [&] { inner_.matmul_forward(out, inp, weight, bias, N, IC, OC); },
        gemm_flops(N, IC, OC));
}

void ProfiledKernels::matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, GemmInput inp, GemmInput weight, int64_t N, int64_t IC, int64_t OC) {
  const int products = (dinp ? 1 : 0) + (dweight ? 1 : 0);
  timed("matmul_backward " + gemm(N, IC, OC), [&] { inner_.matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC); },
        products * gemm_flops(N, IC, OC));
}

void ProfiledKernels::matmul_backward_overwrite(float* dinp, float* dweight, float* dbias, const float* dout, GemmInput inp, GemmInput weight, int64_t N, int64_t IC, int64_t OC) {
  const int products = (dinp ? 1 : 0) + (dweight ? 1 : 0);
  timed("matmul_backward_overwrite " + gemm(N, IC, OC), [&] { inner_.matmul_backward_overwrite(dinp, dweight, dbias, dout, inp, weight, N, IC, OC); },
        products * gemm_flops(N, IC, OC));
}

void ProfiledKernels::attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HD) {
  timed("attention_forward " + heads(B, T, NH, KVH, HD), [&] { inner_.attention_forward(out, lse, qkv, B, T, NH, KVH, HD); },
        causal_attention_flops(B, T, NH, HD));
}

void ProfiledKernels::attention_forward_rows(float* out, const float* qkv, int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HD, int64_t q_begin, int64_t q_count) {
  timed("attention_forward_rows " + heads(B, q_count, NH, KVH, HD), [&] { inner_.attention_forward_rows(out, qkv, B, T, NH, KVH, HD, q_begin, q_count); });
}

void ProfiledKernels::attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HD) {
  timed("attention_backward " + heads(B, T, NH, KVH, HD), [&] { inner_.attention_backward(dqkv, dout, qkv, out, lse, B, T, NH, KVH, HD); },
        2 * causal_attention_flops(B, T, NH, HD));
}

void ProfiledKernels::attention_backward_overwrite(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HD) {
  timed("attention_backward_overwrite " + heads(B, T, NH, KVH, HD), [&] { inner_.attention_backward_overwrite(dqkv, dout, qkv, out, lse, B, T, NH, KVH, HD); },
        2 * causal_attention_flops(B, T, NH, HD));
}

void ProfiledKernels::rope_forward(float* qkv, const float* table, int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HD, int64_t t_begin, int64_t t_count) {
  timed("rope_forward " + heads(B, t_count, NH, KVH, HD), [&] { inner_.rope_forward(qkv, table, B, T, NH, KVH, HD, t_begin, t_count); });
}

void ProfiledKernels::rope_backward(float* dqkv, const float* table, int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HD, int64_t t_begin, int64_t t_count) {
  timed("rope_backward " + heads(B, t_count, NH, KVH, HD), [&] { inner_.rope_backward(dqkv, table, B, T, NH, KVH, HD, t_begin, t_count); });
}

void ProfiledKernels::swiglu_forward(float* out, const float* inp, int64_t N, int64_t F) {
  timed("swiglu_forward " + matrix(N, F), [&] { inner_.swiglu_forward(out, inp, N, F); });
}

void ProfiledKernels::swiglu_backward(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F) {
  timed("swiglu_backward " + matrix(N, F), [&] { inner_.swiglu_backward(dinp, inp, dout, N, F); });
}

void ProfiledKernels::swiglu_backward_overwrite(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F) {
  timed("swiglu_backward_overwrite " + matrix(N, F), [&] { inner_.swiglu_backward_overwrite(dinp, inp, dout, N, F); });
}

void ProfiledKernels::gelu_forward(float* out, const float* inp, int64_t n) {
  timed(fmt::format("gelu_forward {}", n), [&] { inner_.gelu_forward(out, inp, n); });
}

void ProfiledKernels::gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  timed(fmt::format("gelu_backward {}", n), [&] { inner_.gelu_backward(dinp, inp, dout, n); });
}

void ProfiledKernels::gelu_backward_overwrite(float* dinp, const float* inp, const float* dout, int64_t n) {
  timed(fmt::format("gelu_backward_overwrite {}", n), [&] { inner_.gelu_backward_overwrite(dinp, inp, dout, n); });
}

void ProfiledKernels::xent_row_max(float* rowmax, const float* logits, int64_t N, int64_t stride, int64_t vocab_count) {
  timed("xent_row_max " + matrix(N, vocab_count), [&] { inner_.xent_row_max(rowmax, logits, N, stride, vocab_count); });
}

void ProfiledKernels::xent_sumexp_target(float* sumexp, float* target_logit, const float* logits, const float* rowmax, const int32_t* targets, int64_t vocab_begin, int64_t N, int64_t stride, int64_t vocab_count) {
  timed("xent_sumexp_target " + matrix(N, vocab_count), [&] { inner_.xent_sumexp_target(sumexp, target_logit, logits, rowmax, targets, vocab_begin, N, stride, vocab_count); });
}

void ProfiledKernels::xent_loss_grad(float* losses, float* logits, const float* rowmax, const float* sumexp, const float* target_logit, const int32_t* targets, int64_t vocab_begin, float dloss_scale, int64_t N, int64_t stride, int64_t vocab_count) {
  timed("xent_loss_grad " + matrix(N, vocab_count), [&] { inner_.xent_loss_grad(losses, logits, rowmax, sumexp, target_logit, targets, vocab_begin, dloss_scale, N, stride, vocab_count); });
}

void ProfiledKernels::adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, const std::vector<AdamWSegment>& segments, const AdamWStep& hyper, uint16_t* working) {
  timed(fmt::format("adamw_update {}", n), [&] { inner_.adamw_update(param, grad, m, v, n, segments, hyper, working); });
}

}  // namespace trident
