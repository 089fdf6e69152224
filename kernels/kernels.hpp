#pragma once
// The compute backend interface. The model, optimizer and parallel schemes call these operations on
// raw pointers into the backend's memory; a backend (Kokkos in kernels/kokkos/, CUDA in kernels/cuda/)
// implements each. Keeping the interface on pointers + sizes lets one model code drive every backend.
//
// One Kernels object is one ordered queue of work (a CUDA stream, a Kokkos execution-space
// instance): every operation is enqueued on it and returns before it has run. Only the methods that
// hand a value to the host (copy_to_host*, fence) wait. The model, the optimizer and the
// communication layer share the queue, so a step needs no host synchronisation except where a value
// is really needed on the host (the loss and the gradient norm, once per step).
//
// Conventions (every implementation must follow them; the tests in tests/kernels check them):
//  * Row-major. N = B*T rows. Weights are [out, in] (PyTorch Linear layout): y = x W^T + b.
//  * Every backward op ACCUMULATES (+=) into every gradient it writes, parameter and input gradients
//    alike. Callers zero gradient buffers when a fresh gradient is wanted. This makes gradient
//    accumulation over micro-batches and residual branches free.
//  * Deterministic: the same inputs give bit-identical outputs (no atomics on floats, fixed
//    reduction order), so recompute modes and reruns agree bit for bit.
//  * fp32 storage (bf16 where a caller packs activations, round_to_bf16, and GEMM inputs given as bf16
//    patterns, GemmInput); reductions over long axes (LayerNorm statistics, norms, losses) in double.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/matmul_precision.hpp"

namespace trident {

// A run of AdamW's elements that share one weight decay, from `begin` to the next segment's begin.
struct AdamWSegment {
  int64_t begin = 0;
  float weight_decay = 0;
};

// AdamW's values for one update; step counts from 1 (bias correction).
struct AdamWStep {
  float lr = 0, beta1 = 0, beta2 = 0, eps = 0;
  int64_t step = 1;
};

// An input matrix of a GEMM (Kernels::matmul_forward/backward): its fp32 values, the bf16 patterns of
// values that are bf16 numbers (as round_to_bf16 leaves them; a bf16 working copy, a saved activation),
// or both, which then hold the same values. A backend reads the form its matmul precision wants: under
// BF16 the patterns as they are (no rounded copy; CUDA hands them to cuBLASLt), else the values, the
// patterns widened into a copy where only they are given (exact: a bf16 number is a TF32 and an fp32 one).
struct GemmInput {
  const float* values = nullptr;
  const uint16_t* bf16 = nullptr;
  GemmInput(const float* v) : values(v) {}  // implicit: an fp32 operand as before
  GemmInput(const float* v, const uint16_t* patterns) : values(v), bf16(patterns) {}
  static GemmInput patterns(const uint16_t* p) { return {nullptr, p}; }
  // The operand from element k on (a panel of a weight's rows).
  GemmInput at(int64_t k) const { return {values ? values + k : nullptr, bf16 ? bf16 + k : nullptr}; }
};

class Kernels {
 public:
  virtual ~Kernels() = default;
  virtual std::string name() const = 0;

  // ---- memory (in the backend's memory space) ----
  virtual float* alloc(int64_t n) = 0;          // zero-initialised
  virtual int32_t* alloc_int(int64_t n) = 0;    // zero-initialised
  virtual double* alloc_double(int64_t n) = 0;  // zero-initialised (device-side reductions)
  virtual uint16_t* alloc_bf16(int64_t n) = 0;  // zero-initialised bf16 bit patterns (bf16 storage, below)
  virtual void free(void* p) = 0;
  virtual void copy_to_device(float* dst, const float* host_src, int64_t n) = 0;
  virtual void copy_to_host(float* host_dst, const float* src, int64_t n) = 0;
  virtual void copy_to_device_int(int32_t* dst, const int32_t* host_src, int64_t n) = 0;
  virtual void copy_to_host_double(double* host_dst, const double* src, int64_t n) = 0;
  virtual void copy(float* dst, const float* src, int64_t n) = 0;  // device to device
  virtual void fill(float* x, float value, int64_t n) = 0;
  virtual void fill_double(double* x, double value, int64_t n) = 0;
  virtual void fence() = 0;                     // wait for all queued work

  // ---- elementwise ----
  virtual void add(float* out, const float* a, const float* b, int64_t n) = 0;  // out = a + b
  virtual void accumulate(float* y, const float* x, int64_t n) = 0;             // y += x
  virtual void scale(float* x, float s, int64_t n) = 0;                         // x *= s
  // Gradient clipping with the norm left in backend memory (no wait for the host; clip_gradients'
  // rule): coef[0] = float(c) for c = max_norm / (sqrt(square_sums[0] + square_sums[1]) + 1e-6) in
  // double unless c >= 1, then 1 (a NaN norm gives NaN, as on the host).
  virtual void clip_coefficient(float* coef, const double* square_sums, double max_norm) = 0;
  // x *= coef[0] (one float in backend memory), nothing where coef[0] is 1.
  virtual void scale_by(float* x, const float* coef, int64_t n) = 0;
  // Device-side reductions: *acc += sum x^2, *acc += sum x (acc: one double in backend memory). The
  // result stays in backend memory until the caller copies it out, once, when it needs it.
  virtual void sum_squares_into(double* acc, const float* x, int64_t n) = 0;
  virtual void sum_into(double* acc, const float* x, int64_t n) = 0;
  // sum x^2 returned to the host (waits for the queue): for tests and one-off checks, not for steps.
  double sum_squares(const float* x, int64_t n);

  // ---- bf16 storage (train.precision = "bf16": activations kept for backward in half the bytes) ----
  // x rounded IN PLACE to bfloat16 (nearest, ties to even, as the bf16 GEMMs round their operands; a
  // finite value past bf16's largest becomes Inf, NaN stays NaN) and, when packed is not null, each
  // rounded value's bf16 pattern (its top 16 bits) written to packed.
  virtual void round_to_bf16(float* x, uint16_t* packed, int64_t n) = 0;
  // out = the values of the bf16 patterns: exactly the x that round_to_bf16 left.
  virtual void unpack_bf16(float* out, const uint16_t* packed, int64_t n) = 0;
  // packed = the bf16 patterns of x rounded as round_to_bf16 rounds it; x is left as it is (bf16
  // communication buffers of fp32 values: gradients, fp32 master weights).
  virtual void pack_bf16(const float* x, uint16_t* packed, int64_t n) = 0;
  // The norms and activations whose output bf16 storage keeps, with that output rounded in the same
  // call: each is its op followed by round_to_bf16(out, packed, size of out) (packed may be null), the
  // same bits, which is what these defaults do; the CUDA backend rounds in the op's own pass (one read and
  // one write of the output fewer; a gpu-sim test holds it to the defaults' bits).
  virtual void layernorm_forward_rounded(uint16_t* packed, float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int64_t N, int64_t C, float eps);
  virtual void rmsnorm_forward_rounded(uint16_t* packed, float* out, float* rstd, const float* inp,
                                       const float* weight, int64_t N, int64_t C, float eps);
  virtual void residual_layernorm_forward_rounded(uint16_t* packed, float* x, const float* residual, float* out,
                                                  float* mean, float* rstd, const float* weight, const float* bias,
                                                  int64_t N, int64_t C, float eps);
  virtual void residual_rmsnorm_forward_rounded(uint16_t* packed, float* x, const float* residual, float* out,
                                                float* rstd, const float* weight, int64_t N, int64_t C, float eps);
  virtual void gelu_forward_rounded(uint16_t* packed, float* out, const float* inp, int64_t n);
  virtual void swiglu_forward_rounded(uint16_t* packed, float* out, const float* inp, int64_t N, int64_t F);

  // ---- embeddings ----
  // out[i,:] = wte[tokens[i] - vocab_begin, :] when vocab_begin <= tokens[i] < vocab_begin+vocab_count,
  // else 0 (vocab-parallel embedding: the TP group all-reduces the result).
  virtual void embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t vocab_begin,
                                 int64_t vocab_count, int64_t N, int64_t C) = 0;
  // The same from bf16 patterns (wte: a bf16 working copy's), each row read widened.
  virtual void embedding_forward_bf16(float* out, const int32_t* tokens, const uint16_t* wte, int64_t vocab_begin,
                                      int64_t vocab_count, int64_t N, int64_t C) = 0;
  virtual void embedding_backward(float* dwte, const float* dout, const int32_t* tokens,
                                  int64_t vocab_begin, int64_t vocab_count, int64_t N, int64_t C) = 0;
  // out[b,t,:] += wpe[t_begin + t, :] for a [B,T,C] tensor.
  virtual void position_forward(float* out, const float* wpe, int64_t B, int64_t T, int64_t C,
                                int64_t t_begin) = 0;
  virtual void position_backward(float* dwpe, const float* dout, int64_t B, int64_t T, int64_t C,
                                 int64_t t_begin) = 0;

  // ---- LayerNorm (weight and bias; eps: model.norm_eps, GPT-2's 1e-5); mean/rstd [N] are saved for backward ----
  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                 const float* bias, int64_t N, int64_t C, float eps) = 0;
  virtual void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                  const float* inp, const float* weight, const float* mean,
                                  const float* rstd, int64_t N, int64_t C) = 0;

  // ---- RMSNorm (Llama): out = inp * rstd * weight, rstd = 1 / sqrt(mean_c(inp^2) + eps), the mean in
  // double; rstd [N] is saved for backward ----
  virtual void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C,
                               float eps) = 0;
  virtual void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                                const float* weight, const float* rstd, int64_t N, int64_t C) = 0;

  // ---- the residual add fused into the norm that reads the sum (llm.c's fused_residual_forward) ----
  // x += residual, then out = the norm of x, exactly as accumulate(x, residual) followed by
  // layernorm_forward / rmsnorm_forward (the same bits), in one pass fewer over x.
  virtual void residual_layernorm_forward(float* x, const float* residual, float* out, float* mean, float* rstd,
                                          const float* weight, const float* bias, int64_t N, int64_t C, float eps) = 0;
  virtual void residual_rmsnorm_forward(float* x, const float* residual, float* out, float* rstd,
                                        const float* weight, int64_t N, int64_t C, float eps) = 0;

  // ---- matmul with bias: out[N,OC] = inp[N,IC] weight[OC,IC]^T + bias[OC] (bias may be null) ----
  // The GEMMs' operand precision (core/matmul_precision.hpp; FP32 until set); the bias is added in fp32.
  // Attention's products follow BF16 where attention_follows_bf16 (below) says so, on both backends
  // alike: forward q, k, v rounded to bf16 (nearest even) for S = q k^T and P rounded for P v, the
  // softmax in fp32 (its row sums from the unrounded P); backward q, k, v, dout rounded, D from the
  // rounded dout, P = exp(s - lse) in fp32, P rounded for dv = P^T dout, dS = P (dP - D) rounded for dq
  // and dk; every product summed in fp32 (CUDA: tensor cores, cuda/attention_tc.cu). Other head sizes,
  // TF32 (attention stays fp32 there) and attention_forward_rows (incremental decoding) stay fp32.
  virtual void set_matmul_precision(MatmulPrecision precision) = 0;
  // inp and weight are GemmInputs: fp32 values, bf16 patterns or both (above).
  virtual void matmul_forward(float* out, GemmInput inp, GemmInput weight, const float* bias, int64_t N, int64_t IC,
                              int64_t OC) = 0;
  // dinp, dweight, dbias may each be null (not wanted).
  virtual void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, GemmInput inp,
                               GemmInput weight, int64_t N, int64_t IC, int64_t OC) = 0;
  // The backward ops whose input gradient the model writes into a fresh buffer, with that gradient
  // WRITTEN (dinp = the gradient; whatever dinp held, NaN included, is never read) instead of accumulated:
  // each is fill(dinp, 0) followed by its accumulating op, which is what these defaults do, so the same
  // values (a zero sum may come out as -0 instead of +0). The CUDA backend writes in the op's own pass
  // (the dinp GEMM with beta 0; the tensor-core attention): no fill pass, no read of dinp. matmul's dweight and
  // dbias still accumulate.
  virtual void matmul_backward_overwrite(float* dinp, float* dweight, float* dbias, const float* dout, GemmInput inp,
                                         GemmInput weight, int64_t N, int64_t IC, int64_t OC);
  virtual void gelu_backward_overwrite(float* dinp, const float* inp, const float* dout, int64_t n);
  virtual void swiglu_backward_overwrite(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F);
  virtual void attention_backward_overwrite(float* dqkv, const float* dout, const float* qkv, const float* out,
                                            const float* lse, int64_t B, int64_t T, int64_t NH, int64_t KVH,
                                            int64_t HD);

  // ---- causal self-attention, grouped-query (flash-style contract) ----
  // NH query heads and KVH key/value heads of size HD (NH a multiple of KVH; KVH = NH is multi-head
  // attention, KVH = 1 multi-query); query head h reads key/value head h / (NH / KVH), never a copy.
  // qkv [B,T,(NH+2*KVH)*HD]: each position's row is q [NH,HD] | k [KVH,HD] | v [KVH,HD]. out [B,T,NH*HD].
  // Scale 1/sqrt(HD). lse [B,NH,T] receives each query row's log-sum-exp of its scaled, causally
  // masked logits:
  //   lse[b,h,t] = log sum_{j<=t} exp(q_t . k_j / sqrt(HD)),
  // the only statistic backward needs besides out, so attention keeps O(B*NH*T) floats between
  // forward and backward, never the [T,T] probabilities (no implementation stores them in memory
  // that outlives one tile). Softmax probabilities are p[t,j] = exp(s[t,j] - lse[t]).
  virtual void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t NH,
                                 int64_t KVH, int64_t HD) = 0;
  // The forward of the query rows [q_begin, q_begin + q_count) of each sequence alone (always fp32, whatever
  // the matmul precision: under bf16 a decoder's rows differ from the bf16 training forward's by bf16
  // rounding): out [B, q_count, NH*HD],
  // row t attending to the keys 0..t of qkv as in attention_forward (rows of qkv past q_begin + q_count
  // are never read; no lse). Incremental decoding keeps the qkv rows of the tokens so far as its KV cache
  // and computes only the new rows. The values of attention_forward's rows up to rounding (the tiles'
  // GEMMs may block the shorter rows differently).
  virtual void attention_forward_rows(float* out, const float* qkv, int64_t B, int64_t T, int64_t NH, int64_t KVH,
                                      int64_t HD, int64_t q_begin, int64_t q_count) = 0;
  // Backward from the forward's out and lse: D[t] = sum_d dout[t,d] out[t,d], dS = P (dP - D),
  // dq = dS k / sqrt(HD), dk = dS^T q / sqrt(HD), dv = P^T dout, ACCUMULATED into dqkv; the dk and dv of
  // a key/value head sum its group's query heads in a fixed order.
  virtual void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                                  const float* lse, int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HD) = 0;

  // ---- rotary position embedding (Llama; Hugging Face's rotate-half convention) ----
  // IN PLACE on the q and k heads of rows [t_begin, t_begin + t_count) of each of the B sequences of T
  // rows of qkv (laid out as for attention; v untouched); row t is position t. table [positions, HD/2, 2]
  // holds (cos, sin) of position p times frequency i = theta^(-2i/HD) (rope_table() below). For each
  // head x and i < HD/2, with (c, s) = table[t, i]:
  //   x[i] <- x[i] c - x[i + HD/2] s,   x[i + HD/2] <- x[i + HD/2] c + x[i] s.
  virtual void rope_forward(float* qkv, const float* table, int64_t B, int64_t T, int64_t NH, int64_t KVH,
                            int64_t HD, int64_t t_begin, int64_t t_count) = 0;
  // The transpose, IN PLACE on a gradient laid out as qkv (it does not accumulate: dqkv holds the
  // gradient of the rotated q and k on entry and of the unrotated ones on exit):
  //   g[i] <- g[i] c + g[i + HD/2] s,   g[i + HD/2] <- g[i + HD/2] c - g[i] s.
  virtual void rope_backward(float* dqkv, const float* table, int64_t B, int64_t T, int64_t NH, int64_t KVH,
                             int64_t HD, int64_t t_begin, int64_t t_count) = 0;

  // ---- SwiGLU (Llama's MLP): inp [N, 2F] holds gate | up per row; out [N, F] = silu(gate) * up ----
  virtual void swiglu_forward(float* out, const float* inp, int64_t N, int64_t F) = 0;
  // dinp [N, 2F] (gate | up) ACCUMULATES d/dgate and d/dup of dout [N, F].
  virtual void swiglu_backward(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F) = 0;

  // ---- GELU, tanh approximation ----
  virtual void gelu_forward(float* out, const float* inp, int64_t n) = 0;
  virtual void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) = 0;

  // ---- fused softmax cross-entropy over a (possibly vocab-parallel) logits shard ----
  // logits [N, stride], of which the first `vocab_count` columns are real vocabulary entries
  // [vocab_begin, vocab_begin+vocab_count); columns past vocab_count are padding and never enter the
  // softmax. Three phases so that a TP group can reduce between them (MAX after 1, SUM after 2):
  //   1. xent_row_max:        rowmax[i] = max_j logits[i,j]
  //   2. xent_sumexp_target:  sumexp[i] = sum_j exp(logits[i,j] - rowmax[i]);
  //                           target_logit[i] = logits[i, targets[i]-vocab_begin] if in range, else 0
  //   3. xent_loss_grad:      losses[i] = log(sumexp[i]) + rowmax[i] - target_logit[i], and logits is
  //                           overwritten IN PLACE by dloss_scale * (softmax - onehot) (padding -> 0),
  //                           so no second [N, V] tensor is needed.
  // A negative target marks a position that is not scored (the padding of an evaluation's last batch):
  // its loss is 0 and its row of the gradient is 0.
  virtual void xent_row_max(float* rowmax, const float* logits, int64_t N, int64_t stride,
                            int64_t vocab_count) = 0;
  virtual void xent_sumexp_target(float* sumexp, float* target_logit, const float* logits, const float* rowmax,
                                  const int32_t* targets, int64_t vocab_begin, int64_t N, int64_t stride,
                                  int64_t vocab_count) = 0;
  virtual void xent_loss_grad(float* losses, float* logits, const float* rowmax, const float* sumexp,
                              const float* target_logit, const int32_t* targets, int64_t vocab_begin,
                              float dloss_scale, int64_t N, int64_t stride, int64_t vocab_count) = 0;

  // ---- AdamW, exactly as torch.optim.AdamW, over many tensors in one pass ----
  // Element i of [0, n) belongs to the last segment s with segments[s].begin <= i (the first begins
  // at 0; a segment is a tensor, or adjacent tensors with the same weight decay). step counts from 1:
  // p *= 1 - lr*segments[s].weight_decay; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
  // p -= lr * (m / (1-b1^step)) / (sqrt(v / (1-b2^step)) + eps).
  // working (null: none) receives the bf16 patterns of the updated p (rounded as pack_bf16 rounds): p is
  // then the fp32 master of a bf16 working copy (train.precision = "bf16"), written in the same pass.
  virtual void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                            const std::vector<AdamWSegment>& segments, const AdamWStep& hyper, uint16_t* working) = 0;

  // ---- the device ----
  // Achievable dense TFLOP/s of one rank's device for MFU when runtime.peak_tflops is 0: the CPU's
  // measured sgemm rate (Kokkos), the GPU's dense bf16 tensor-core peak derived from its clock (CUDA;
  // used only for a GPU that src/train/gpu_peaks.hpp's data-sheet table does not name).
  virtual double peak_tflops() = 0;
  // The device's name as its runtime reports it (CUDA: cudaDeviceProp::name, e.g. "NVIDIA H100 80GB
  // HBM3"); empty on the host backend.
  virtual std::string device_name() const { return ""; }
  // Bytes of backend memory allocated now and at the most so far (the caching allocator's view on
  // the GPU; what alloc() handed out on the host).
  virtual int64_t allocated_bytes() const = 0;
  virtual int64_t peak_allocated_bytes() const = 0;
  // Whether alloc()'s memory is ordinary host memory (a host backend): after fence() the host may
  // read and write it in place instead of through copies (checkpoints then need no staging copy).
  virtual bool host_memory() const { return false; }
};

// The Kokkos backend on the default host execution space (Serial here; OpenMP where Kokkos was built
// with it). Kokkos must be initialised before, and the object destroyed before Kokkos::finalize
// (it owns a workspace). The GPU path is the native CUDA backend (kernels/cuda), not Kokkos' CUDA.
std::unique_ptr<Kernels> make_kokkos_kernels();

// The native CUDA backend on the current device (cudaSetDevice first): its own stream, a caching
// allocator, cuBLASLt GEMMs. Loads the CUDA module (cuda_module.hpp). Throws trident::Error in a build
// without CUDA, without a device, or when the module cannot be loaded.
std::unique_ptr<Kernels> make_cuda_kernels();

// RoPE's table for positions [0, positions) at head size HD (even): [positions, HD/2, 2] of (cos, sin),
// the angles p * theta^(-2i/HD) computed in double and rounded once.
std::vector<float> rope_table(double theta, int64_t HD, int64_t positions);

// Whether attention_forward/backward round their products' operands to bf16 (set_matmul_precision):
// under BF16, for head sizes 64 and 128, those the CUDA backend has tensor-core kernels for; both
// backends follow this rule, so they compute the same numbers for every head size.
inline bool attention_follows_bf16(MatmulPrecision precision, int64_t HD) {
  return precision == MatmulPrecision::BF16 && (HD == 64 || HD == 128);
}

// attention_forward_rows' precondition, checked by every backend.
inline bool attention_rows_valid(int64_t T, int64_t q_begin, int64_t q_count) {
  return q_begin >= 0 && q_count >= 0 && q_begin + q_count <= T;
}

inline void Kernels::layernorm_forward_rounded(uint16_t* packed, float* out, float* mean, float* rstd,
                                               const float* inp, const float* weight, const float* bias, int64_t N,
                                               int64_t C, float eps) {
  layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps);
  round_to_bf16(out, packed, N * C);
}

inline void Kernels::rmsnorm_forward_rounded(uint16_t* packed, float* out, float* rstd, const float* inp,
                                             const float* weight, int64_t N, int64_t C, float eps) {
  rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
  round_to_bf16(out, packed, N * C);
}

inline void Kernels::residual_layernorm_forward_rounded(uint16_t* packed, float* x, const float* residual, float* out,
                                                        float* mean, float* rstd, const float* weight,
                                                        const float* bias, int64_t N, int64_t C, float eps) {
  residual_layernorm_forward(x, residual, out, mean, rstd, weight, bias, N, C, eps);
  round_to_bf16(out, packed, N * C);
}

inline void Kernels::residual_rmsnorm_forward_rounded(uint16_t* packed, float* x, const float* residual, float* out,
                                                      float* rstd, const float* weight, int64_t N, int64_t C,
                                                      float eps) {
  residual_rmsnorm_forward(x, residual, out, rstd, weight, N, C, eps);
  round_to_bf16(out, packed, N * C);
}

inline void Kernels::gelu_forward_rounded(uint16_t* packed, float* out, const float* inp, int64_t n) {
  gelu_forward(out, inp, n);
  round_to_bf16(out, packed, n);
}

inline void Kernels::swiglu_forward_rounded(uint16_t* packed, float* out, const float* inp, int64_t N, int64_t F) {
  swiglu_forward(out, inp, N, F);
  round_to_bf16(out, packed, N * F);
}

inline void Kernels::matmul_backward_overwrite(float* dinp, float* dweight, float* dbias, const float* dout,
                                               GemmInput inp, GemmInput weight, int64_t N, int64_t IC, int64_t OC) {
  if (dinp) fill(dinp, 0.f, N * IC);
  matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
}

inline void Kernels::gelu_backward_overwrite(float* dinp, const float* inp, const float* dout, int64_t n) {
  fill(dinp, 0.f, n);
  gelu_backward(dinp, inp, dout, n);
}

inline void Kernels::swiglu_backward_overwrite(float* dinp, const float* inp, const float* dout, int64_t N,
                                               int64_t F) {
  fill(dinp, 0.f, N * 2 * F);
  swiglu_backward(dinp, inp, dout, N, F);
}

inline void Kernels::attention_backward_overwrite(float* dqkv, const float* dout, const float* qkv, const float* out,
                                                  const float* lse, int64_t B, int64_t T, int64_t NH, int64_t KVH,
                                                  int64_t HD) {
  fill(dqkv, 0.f, B * T * (NH + 2 * KVH) * HD);
  attention_backward(dqkv, dout, qkv, out, lse, B, T, NH, KVH, HD);
}

inline double Kernels::sum_squares(const float* x, int64_t n) {
  double* acc = alloc_double(1);
  sum_squares_into(acc, x, n);
  double host = 0;
  copy_to_host_double(&host, acc, 1);
  free(acc);
  return host;
}

}  // namespace trident
