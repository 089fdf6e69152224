// CudaKernels: the Kernels interface on one CUDA device. The object owns one non-blocking stream
// (every launch, memset, copy and GEMM is enqueued on it), a caching allocator, the cuBLASLt state
// and a small reduction scratch. Only copy_to_host*, fence() and the destructor synchronise.
#include "cuda/cuda_kernels.hpp"

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "cuda/allocator.cuh"
#include "cuda/check.cuh"
#include "cuda/matmul.cuh"
#include "cuda/ops.cuh"
#include "cuda/upload_ring.hpp"
#include "kernel_checks.hpp"
#include "kernels.hpp"

namespace trident {

namespace cuda {
namespace {

// Dense bf16 tensor-core FLOP per clock per SM (FMA = 2 FLOP) by compute capability. Known:
// sm_80 (A100) 2048; sm_90 (H100/H200) 4096; sm_100/103 (B200/B300) 8192. Everything else
// (sm_86/89 and consumer parts, sm_7x without bf16, sm_12x) gets 1024, a conservative value at or
// below the data-centre parts of those generations (A10/L40S: 1024; RTX 4090 with fp32 accumulate: 512).
int bf16_flop_per_clock_per_sm(int major, int minor) {
  if (major == 9) return 4096;
  if (major == 10) return 8192;
  if (major == 8 && minor == 0) return 2048;
  return 1024;
}

class Stream {
 public:
  Stream() { TRIDENT_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~Stream() {
    cudaStreamSynchronize(s_);
    cudaStreamDestroy(s_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

class CudaKernels final : public Kernels {
 public:
  CudaKernels()
      : device_(current_device()),
        alloc_(stream_.get()),
        matmul_(stream_.get(), alloc_),
        sum_partials_(static_cast<double*>(alloc_.allocate(kSumMaxBlocks * int64_t(sizeof(double))))),
        uploads_(stream_.get()) {}
  ~CudaKernels() override {
    cudaStreamSynchronize(stream_.get());  // members go in reverse order: matmul, allocator, stream
    alloc_.release(sum_partials_);
  }

  std::string name() const override { return "cuda"; }
  cudaStream_t stream() const { return stream_.get(); }

  // ---- memory ----
  float* alloc(int64_t n) override { return static_cast<float*>(alloc_.allocate_zeroed(bytes(n, sizeof(float)))); }
  int32_t* alloc_int(int64_t n) override {
    return static_cast<int32_t*>(alloc_.allocate_zeroed(bytes(n, sizeof(int32_t))));
  }
  double* alloc_double(int64_t n) override {
    return static_cast<double*>(alloc_.allocate_zeroed(bytes(n, sizeof(double))));
  }
  uint16_t* alloc_bf16(int64_t n) override {
    return static_cast<uint16_t*>(alloc_.allocate_zeroed(bytes(n, sizeof(uint16_t))));
  }
  void free(void* p) override { alloc_.release(p); }

  // Host -> device: the caller may reuse its buffer as soon as the call returns. Small uploads (the ids of
  // every micro-batch) go through page-locked slots without waiting for the GPU (upload_ring.hpp). A larger
  // one from pageable memory returns once the source has been staged; from page-locked (or managed) memory
  // it is truly asynchronous, so it is waited for, to keep that guarantee.
  void copy_to_device(float* dst, const float* host_src, int64_t n) override {
    upload(dst, host_src, bytes(n, sizeof(float)));
  }
  void copy_to_device_int(int32_t* dst, const int32_t* host_src, int64_t n) override {
    upload(dst, host_src, bytes(n, sizeof(int32_t)));
  }
  void copy_to_host(float* host_dst, const float* src, int64_t n) override {
    download(host_dst, src, bytes(n, sizeof(float)));
  }
  void copy_to_host_double(double* host_dst, const double* src, int64_t n) override {
    download(host_dst, src, bytes(n, sizeof(double)));
  }
  void copy(float* dst, const float* src, int64_t n) override {
    if (n <= 0 || dst == src) return;
    TRIDENT_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(n) * sizeof(float), cudaMemcpyDeviceToDevice, stream()));
  }
  void fill(float* x, float value, int64_t n) override { cuda::fill(stream(), x, value, n); }
  void fill_double(double* x, double value, int64_t n) override { cuda::fill_double(stream(), x, value, n); }
  void fence() override { TRIDENT_CUDA_CHECK(cudaStreamSynchronize(stream())); }

  // ---- elementwise ----
  void add(float* out, const float* a, const float* b, int64_t n) override { cuda::add(stream(), out, a, b, n); }
  void accumulate(float* y, const float* x, int64_t n) override { cuda::accumulate(stream(), y, x, n); }
  void scale(float* x, float s, int64_t n) override { cuda::scale(stream(), x, s, n); }
  void clip_coefficient(float* coef, const double* square_sums, double max_norm) override {
    cuda::clip_coefficient(stream(), coef, square_sums, max_norm);
  }
  void scale_by(float* x, const float* coef, int64_t n) override { cuda::scale_by(stream(), x, coef, n); }
  void sum_squares_into(double* acc, const float* x, int64_t n) override {
    cuda::sum_into(stream(), acc, x, n, true, sum_partials_);
  }
  void sum_into(double* acc, const float* x, int64_t n) override {
    cuda::sum_into(stream(), acc, x, n, false, sum_partials_);
  }

  // ---- bf16 storage ----
  void round_to_bf16(float* x, uint16_t* packed, int64_t n) override { cuda::round_to_bf16(stream(), x, packed, n); }
  void pack_bf16(const float* x, uint16_t* packed, int64_t n) override { cuda::pack_bf16(stream(), x, packed, n); }
  void unpack_bf16(float* out, const uint16_t* packed, int64_t n) override {
    cuda::unpack_bf16(stream(), out, packed, n);
  }

  // ---- embeddings ----
  void embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t vocab_begin,
                         int64_t vocab_count, int64_t N, int64_t C) override {
    cuda::embedding_forward(stream(), out, tokens, wte, vocab_begin, vocab_count, N, C);
  }
  void embedding_forward_bf16(float* out, const int32_t* tokens, const uint16_t* wte, int64_t vocab_begin,
                              int64_t vocab_count, int64_t N, int64_t C) override {
    cuda::embedding_forward(stream(), out, tokens, wte, vocab_begin, vocab_count, N, C);
  }
  void embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int64_t vocab_begin,
                          int64_t vocab_count, int64_t N, int64_t C) override {
    cuda::embedding_backward(stream(), alloc_, dwte, dout, tokens, vocab_begin, vocab_count, N, C);
  }
  void position_forward(float* out, const float* wpe, int64_t B, int64_t T, int64_t C, int64_t t_begin) override {
    cuda::position_forward(stream(), out, wpe, B, T, C, t_begin);
  }
  void position_backward(float* dwpe, const float* dout, int64_t B, int64_t T, int64_t C,
                         int64_t t_begin) override {
    cuda::position_backward(stream(), dwpe, dout, B, T, C, t_begin);
  }

  // ---- LayerNorm ----
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, int64_t N, int64_t C, float eps) override {
    cuda::layernorm_forward(stream(), out, mean, rstd, inp, weight, bias, N, C, eps);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, const float* mean, const float* rstd, int64_t N,
                          int64_t C) override {
    cuda::layernorm_backward(stream(), alloc_, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }

  // ---- RMSNorm ----
  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C,
                       float eps) override {
    cuda::rmsnorm_forward(stream(), out, rstd, inp, weight, N, C, eps);
  }
  void residual_layernorm_forward(float* x, const float* residual, float* out, float* mean, float* rstd,
                                  const float* weight, const float* bias, int64_t N, int64_t C, float eps) override {
    cuda::residual_layernorm_forward(stream(), x, residual, out, mean, rstd, weight, bias, N, C, eps);
  }
  void residual_rmsnorm_forward(float* x, const float* residual, float* out, float* rstd, const float* weight,
                                int64_t N, int64_t C, float eps) override {
    cuda::residual_rmsnorm_forward(stream(), x, residual, out, rstd, weight, N, C, eps);
  }
  // ---- the norms and activations with their output rounded for bf16 storage in the same pass ----
  void layernorm_forward_rounded(uint16_t* packed, float* out, float* mean, float* rstd, const float* inp,
                                 const float* weight, const float* bias, int64_t N, int64_t C, float eps) override {
    cuda::layernorm_forward(stream(), out, mean, rstd, inp, weight, bias, N, C, eps, {true, packed});
  }
  void rmsnorm_forward_rounded(uint16_t* packed, float* out, float* rstd, const float* inp, const float* weight,
                               int64_t N, int64_t C, float eps) override {
    cuda::rmsnorm_forward(stream(), out, rstd, inp, weight, N, C, eps, {true, packed});
  }
  void residual_layernorm_forward_rounded(uint16_t* packed, float* x, const float* residual, float* out, float* mean,
                                          float* rstd, const float* weight, const float* bias, int64_t N, int64_t C,
                                          float eps) override {
    cuda::residual_layernorm_forward(stream(), x, residual, out, mean, rstd, weight, bias, N, C, eps, {true, packed});
  }
  void residual_rmsnorm_forward_rounded(uint16_t* packed, float* x, const float* residual, float* out, float* rstd,
                                        const float* weight, int64_t N, int64_t C, float eps) override {
    cuda::residual_rmsnorm_forward(stream(), x, residual, out, rstd, weight, N, C, eps, {true, packed});
  }
  void gelu_forward_rounded(uint16_t* packed, float* out, const float* inp, int64_t n) override {
    cuda::gelu_forward(stream(), out, inp, n, {true, packed});
  }
  void swiglu_forward_rounded(uint16_t* packed, float* out, const float* inp, int64_t N, int64_t F) override {
    cuda::swiglu_forward(stream(), out, inp, N, F, {true, packed});
  }
  void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                        const float* rstd, int64_t N, int64_t C) override {
    cuda::rmsnorm_backward(stream(), alloc_, dinp, dweight, dout, inp, weight, rstd, N, C);
  }

  // ---- matmul ----
  void set_matmul_precision(MatmulPrecision precision) override {
    matmul_.set_precision(precision);
    matmul_precision_ = precision;
  }
  void matmul_forward(float* out, GemmInput inp, GemmInput weight, const float* bias, int64_t N, int64_t IC,
                      int64_t OC) override {
    matmul_.forward(out, inp, weight, bias, N, IC, OC);
  }
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, GemmInput inp,
                       GemmInput weight, int64_t N, int64_t IC, int64_t OC) override {
    matmul_.backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
  }
  void matmul_backward_overwrite(float* dinp, float* dweight, float* dbias, const float* dout, GemmInput inp,
                                 GemmInput weight, int64_t N, int64_t IC, int64_t OC) override {
    matmul_.backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC, cuda::GradWrite::Overwrite);
  }

  // ---- attention ----
  void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t NH, int64_t KVH,
                         int64_t HD) override {
    if (tensor_core_attention(HD))
      cuda::attention_forward_tc(stream(), out, lse, qkv, B, T, NH, KVH, HD);
    else
      cuda::attention_forward(stream(), out, lse, qkv, B, T, NH, KVH, HD);
  }
  void attention_forward_rows(float* out, const float* qkv, int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HD,
                              int64_t q_begin, int64_t q_count) override {
    cuda::attention_forward_rows(stream(), out, qkv, B, T, NH, KVH, HD, q_begin, q_count);
  }
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                          int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HD) override {
    if (tensor_core_attention(HD))
      cuda::attention_backward_tc(stream(), alloc_, dqkv, dout, qkv, out, lse, B, T, NH, KVH, HD);
    else
      cuda::attention_backward(stream(), alloc_, dqkv, dout, qkv, out, lse, B, T, NH, KVH, HD);
  }
  // The tensor-core kernels write dqkv in their own pass; attention.cu's fp32 kernels accumulate (the default).
  void attention_backward_overwrite(float* dqkv, const float* dout, const float* qkv, const float* out,
                                    const float* lse, int64_t B, int64_t T, int64_t NH, int64_t KVH,
                                    int64_t HD) override {
    if (tensor_core_attention(HD))
      cuda::attention_backward_tc(stream(), alloc_, dqkv, dout, qkv, out, lse, B, T, NH, KVH, HD,
                                  cuda::GradWrite::Overwrite);
    else
      Kernels::attention_backward_overwrite(dqkv, dout, qkv, out, lse, B, T, NH, KVH, HD);
  }

  // ---- RoPE ----
  void rope_forward(float* qkv, const float* table, int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HD,
                    int64_t t_begin, int64_t t_count) override {
    check_rope("rope_forward", T, NH, KVH, HD, t_begin, t_count);
    cuda::rope_apply(stream(), qkv, table, B, T, NH, KVH, HD, t_begin, t_count, 1.0f);
  }
  void rope_backward(float* dqkv, const float* table, int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HD,
                     int64_t t_begin, int64_t t_count) override {
    check_rope("rope_backward", T, NH, KVH, HD, t_begin, t_count);
    cuda::rope_apply(stream(), dqkv, table, B, T, NH, KVH, HD, t_begin, t_count, -1.0f);
  }

  // ---- SwiGLU ----
  void swiglu_forward(float* out, const float* inp, int64_t N, int64_t F) override {
    cuda::swiglu_forward(stream(), out, inp, N, F);
  }
  void swiglu_backward(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F) override {
    cuda::swiglu_backward(stream(), dinp, inp, dout, N, F);
  }
  void swiglu_backward_overwrite(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F) override {
    cuda::swiglu_backward(stream(), dinp, inp, dout, N, F, cuda::GradWrite::Overwrite);
  }

  // ---- GELU ----
  void gelu_forward(float* out, const float* inp, int64_t n) override { cuda::gelu_forward(stream(), out, inp, n); }
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) override {
    cuda::gelu_backward(stream(), dinp, inp, dout, n);
  }
  void gelu_backward_overwrite(float* dinp, const float* inp, const float* dout, int64_t n) override {
    cuda::gelu_backward(stream(), dinp, inp, dout, n, cuda::GradWrite::Overwrite);
  }

  // ---- cross-entropy ----
  void xent_row_max(float* rowmax, const float* logits, int64_t N, int64_t stride, int64_t vocab_count) override {
    cuda::xent_row_max(stream(), rowmax, logits, N, stride, vocab_count);
  }
  void xent_sumexp_target(float* sumexp, float* target_logit, const float* logits, const float* rowmax,
                          const int32_t* targets, int64_t vocab_begin, int64_t N, int64_t stride,
                          int64_t vocab_count) override {
    cuda::xent_sumexp_target(stream(), sumexp, target_logit, logits, rowmax, targets, vocab_begin, N, stride,
                             vocab_count);
  }
  void xent_loss_grad(float* losses, float* logits, const float* rowmax, const float* sumexp,
                      const float* target_logit, const int32_t* targets, int64_t vocab_begin, float dloss_scale,
                      int64_t N, int64_t stride, int64_t vocab_count) override {
    cuda::xent_loss_grad(stream(), losses, logits, rowmax, sumexp, target_logit, targets, vocab_begin, dloss_scale, N,
                         stride, vocab_count);
  }

  // ---- AdamW ----
  void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                    const std::vector<AdamWSegment>& segments, const AdamWStep& hyper, uint16_t* working) override {
    check_adamw_segments(segments, n);
    cuda::adamw_update(stream(), param, grad, m, v, n, segments, hyper, working);
  }

  // ---- the device ----
  // Dense bf16 tensor-core peak: SMs x clock (cudaDevAttrClockRate: the peak clock, kHz) x FLOP/clock/SM.
  // MFU uses it only for a device the data-sheet table (src/train/gpu_peaks.hpp) does not name.
  double peak_tflops() override {
    int sms = 0, clock_khz = 0, major = 0, minor = 0;
    TRIDENT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_));
    TRIDENT_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device_));
    TRIDENT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_));
    TRIDENT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device_));
    return double(sms) * double(clock_khz) * 1e3 * double(bf16_flop_per_clock_per_sm(major, minor)) / 1e12;
  }
  std::string device_name() const override {
    cudaDeviceProp prop{};
    TRIDENT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    return std::string(prop.name);
  }
  int64_t allocated_bytes() const override { return alloc_.allocated(); }
  int64_t peak_allocated_bytes() const override { return alloc_.peak(); }

 private:
  static int current_device() {
    int d = 0;
    TRIDENT_CUDA_CHECK(cudaGetDevice(&d));
    return d;
  }
  static int64_t bytes(int64_t n, size_t elem) {
    TRIDENT_CHECK(n >= 0, "CUDA backend: negative element count {}", n);
    return n * int64_t(elem);
  }
  void upload(void* dst, const void* host_src, int64_t nbytes) {
    if (nbytes <= 0 || uploads_.upload(dst, host_src, size_t(nbytes))) return;
    TRIDENT_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, size_t(nbytes), cudaMemcpyHostToDevice, stream()));
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, host_src) != cudaSuccess) {
      cudaGetLastError();
      attr.type = cudaMemoryTypeUnregistered;
    }
    if (attr.type != cudaMemoryTypeUnregistered) TRIDENT_CUDA_CHECK(cudaStreamSynchronize(stream()));
  }
  void download(void* host_dst, const void* src, int64_t nbytes) {
    if (nbytes <= 0) return;
    TRIDENT_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, size_t(nbytes), cudaMemcpyDeviceToHost, stream()));
    TRIDENT_CUDA_CHECK(cudaStreamSynchronize(stream()));
  }

  // Attention in bf16 (attention_follows_bf16) runs on tensor cores (attention_tc.cu), everything else
  // on attention.cu's fp32 kernels.
  bool tensor_core_attention(int64_t HD) const {
    return attention_follows_bf16(matmul_precision_, HD) && cuda::tensor_core_attention_supported(HD);
  }

  int device_;
  Stream stream_;
  DeviceAllocator alloc_;
  Matmul matmul_;
  MatmulPrecision matmul_precision_ = MatmulPrecision::FP32;
  double* sum_partials_;  // kSumMaxBlocks doubles: sum_into's block partials (stream-ordered reuse)
  UploadRing uploads_;    // destroyed first: waits for its copies while the stream still exists
};

}  // namespace

void* native_stream(Kernels& kernels) {
  auto* k = dynamic_cast<CudaKernels*>(&kernels);
  return k ? static_cast<void*>(k->stream()) : nullptr;
}

std::unique_ptr<Kernels> make_kernels() { return std::make_unique<CudaKernels>(); }

}  // namespace cuda

}  // namespace trident
