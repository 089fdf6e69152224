#pragma once
// Forward and backward of one pipeline chunk of a GPT-2 or Llama-shaped model on one rank, on any
// compute backend (kernels/kernels.hpp). The whole model is the chunk ChunkSpec::whole_model().
//
// Per layer: x += attn(norm1(x)); x += mlp(norm2(x)). Final norm, logits = x W_te^T (tied) or
// x W_head^T, mean cross-entropy over all positions. The components come from the shapes (GptShapes):
// LayerNorm or RMSNorm, learned positions added to the embedding or RoPE applied to q and k after
// their projection (and its transpose to their gradient), multi-head or grouped-query attention
// (the rank's q | k | v as one fused GEMM), GELU or SwiGLU (gate | up as one fused GEMM), biases or none. Activation checkpointing (train.recompute):
//   none       every layer keeps all its activations;
//   selective  layers keep everything but the attention core's softmax statistics (the per-row
//              log-sum-exp, [B, NH, T]), which are recomputed from the stored qkv in backward. Attention
//              is flash-style (kernels.hpp), so no mode ever stores the [B, NH, T, T] probabilities;
//   full       only each layer's input is kept; the layer's forward is rerun before its backward.
// Kernels are deterministic, so the three modes give bit-identical losses and gradients.
//
// Each residual add is fused with the norm that follows it (Kernels::residual_layernorm_forward, the
// same bits as the add and then the norm): x + attn with the layer's ln_2, and in a forward pass the
// layer's output x + mlp with the next layer's ln_1, or with ln_f after the chunk's last layer when it
// holds the head (llm.c's fused_residual_forward). A layer rerun inside backward (full recompute)
// computes its own ln_1 and adds alone.
//
// train.precision = "bf16" (Precision::BF16): the activations a layer keeps for backward, its norm
// outputs, q|k|v, attention output, MLP pre-activation and activation, are rounded to bf16
// as soon as they are produced (by the norm or activation itself, Kernels::*_rounded; after a GEMM or
// attention by Kernels::round_to_bf16), so forward goes on with the rounded values, and
// a slot keeps only their bf16 patterns. The GEMMs read those patterns (GemmInput: no rounded copy on a
// GPU), in forward and backward; backward unpacks into one shared fp32 set only what other kernels read
// (q|k|v, the attention output, the MLP pre-activation; and the norm outputs that SP gathers). Forward and
// backward therefore read the same values, the three recompute modes stay bit-identical, and these
// tensors take half the bytes. A bf16 working copy of the parameters (model/bf16_working_copy.hpp) gives
// the GEMMs its weights' patterns the same way (ParameterSource::patterns), and the token embedding reads
// its rows from them: neither the token embedding nor an untied LM head is ever widened to fp32. The residual stream (each layer's input and its sum after attention) and
// the statistics (mean, rstd, log-sum-exp) stay fp32, as do parameters and gradients.
//
// Micro-batches in flight (pipeline schedules) each own an activation slot; a slot is taken by
// forward() and given back by backward() (or release()). The chunk holding the LM head runs the
// head's backward right after the loss, so its logits never outlive one micro-batch. The loss is
// summed in backend memory and read by the host once per step (take_loss_sum()).
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "comm/group.hpp"
#include "core/config.hpp"
#include "kernels.hpp"
#include "model/parameters.hpp"

namespace trident {

// Megatron-style tensor parallelism over a TP group: attention heads, the MLP inner dimension and
// the vocabulary are split among its ranks (column-parallel c_attn and c_fc, row-parallel c_proj,
// vocab-parallel embedding and LM head with a vocab-parallel cross-entropy that never gathers the
// logits). Without sequence parallelism, the per-layer communication is one all-reduce after each
// row-parallel GEMM in forward and one after each column-parallel GEMM's input gradient in backward.
// With it, LayerNorms and residuals work on this rank's 1/tp of the tokens; all-gathers before the
// column-parallel GEMMs (and again in backward, as Megatron does, instead of storing the gathered
// input) and reduce-scatters after the row-parallel ones replace the all-reduces.
struct TensorParallel {
  Group* group = nullptr;  // null: no tensor parallelism
  bool sequence_parallel = false;
  int size() const { return group ? group->size() : 1; }
  int rank() const { return group ? group->rank() : 0; }
};

// Bytes of activation memory held between forward and backward, and of the scratch buffers.
struct ActivationBytes {
  int64_t saved = 0;    // per micro-batch in flight: kept from forward for backward
  int64_t scratch = 0;  // shared: recompute buffers, gradient scratch, logits
  int64_t peak_slots = 0;  // most micro-batches in flight at once so far
  int64_t peak() const { return saved * peak_slots + scratch; }
};

// What backward tells an observer (data parallelism) about the gradients, so their reduction can
// start while the rest of backward runs.
// Backward walks the layout from its end: the head (inside forward, on the head chunk), the layers
// last to first, then the embedding.
struct GradientHooks {
  // A micro-batch's backward is about to accumulate into grads()[begin, end).
  std::function<void(int64_t begin, int64_t end)> writing;
  // grads()[from, total) hold all of this micro-batch's contributions; from == 0 ends its backward.
  std::function<void(int64_t from)> final_from;
};

// ZeRO-2: where backward's gradients go when the chunk keeps no whole-chunk gradient buffer. Backward
// writes a micro-batch's gradients segment by segment (the head, each layer from the last, the token
// and position embeddings; a tied head's token embedding is its own segment): open() gives a buffer
// for the segment, zeroed (element k is flat element begin + k), close() hands it back holding all of
// this micro-batch's contributions to [begin, end). At most two segments are open at once.
class GradientSink {
 public:
  virtual ~GradientSink() = default;
  virtual float* open(int64_t begin, int64_t end) = 0;
  virtual void close(int64_t begin, int64_t end) = 0;
};

// ZeRO-3: where forward and backward read the parameters when the chunk keeps no whole-chunk
// parameter buffer. The model acquires a segment (a layer, the head's tail, the token or position
// embedding) just before its forward or backward and releases it right after; prefetch() names the
// segment it will acquire next, so its gather can overlap the current segment's compute.
class ParameterSource {
 public:
  virtual ~ParameterSource() = default;
  // The values of flat elements [begin, end) (element k is begin + k), valid until release().
  virtual const float* acquire(int64_t begin, int64_t end) = 0;
  virtual void release(int64_t begin, int64_t end) = 0;
  virtual void prefetch(int64_t begin, int64_t end) = 0;
  // The bf16 patterns of the chunk's parameters (element k: flat element k) when the acquired values are
  // their widening (a bf16 working copy), for the GEMMs to read as they are; else null.
  virtual const uint16_t* patterns() const { return nullptr; }
};

// The ParameterSource of chunk `chunk` of an owner that serves several chunks through its own
// acquire / release / prefetch (int chunk, int64_t begin, int64_t end) (ZeRO-3's ShardedParameters, a
// Bf16WorkingCopy); the owner befriends it when those are private.
template <class Owner>
class ChunkParameterSource : public ParameterSource {
 public:
  ChunkParameterSource(Owner& owner, int chunk) : owner_(owner), chunk_(chunk) {}
  const float* acquire(int64_t begin, int64_t end) override { return owner_.acquire(chunk_, begin, end); }
  void release(int64_t begin, int64_t end) override { owner_.release(chunk_, begin, end); }
  void prefetch(int64_t begin, int64_t end) override { owner_.prefetch(chunk_, begin, end); }

 protected:
  Owner& owner_;
  int chunk_;
};

// How a chunk keeps its activations: the recompute mode, bf16 storage (above), and how many rows of the
// LM head's fp32 logits exist at once: the head runs the logits, the vocab-parallel cross-entropy and
// its backward over the micro-batch's rows in chunks whose logits take at most logits_chunk_bytes (at
// least one row; 0: all rows at once), so the [B*T, V] logits are never stored whole.
struct ActivationPolicy {
  Recompute recompute = Recompute::None;
  Precision precision = Precision::FP32;
  int64_t logits_chunk_bytes = 0;
  ActivationPolicy(Recompute r = Recompute::None, Precision p = Precision::FP32, int64_t chunk_bytes = 0)
      : recompute(r), precision(p), logits_chunk_bytes(chunk_bytes) {}
};

inline ActivationPolicy activation_policy(const TrainConfig& t) {
  return {t.recompute, t.precision, t.logits_chunk_bytes()};
}

// The whole-chunk buffers a GptModel allocates. ZeRO-2 gives backward a GradientSink instead of the
// gradient buffer, ZeRO-3 forward and backward a ParameterSource instead of the parameter buffer: a
// chunk built for them never allocates those buffers, not even for a moment at start-up.
struct WholeBuffers {
  bool parameters = true;
  bool gradients = true;
};

class GptModel {
 public:
  // B: sequences per micro-batch. Parameters and gradients (those `whole` asks for) are allocated
  // zeroed; with tp, this rank's shard of them (layout().tp_rank()).
  // The GEMMs' operand precision is the Kernels' own (set_matmul_precision), not the policy's.
  GptModel(const GptShapes& shapes, Kernels& kernels, ActivationPolicy policy, int64_t B, TensorParallel tp = {},
           ChunkSpec chunk = ChunkSpec::whole_model(), WholeBuffers whole = {});
  ~GptModel();
  GptModel(const GptModel&) = delete;
  GptModel& operator=(const GptModel&) = delete;

  const ParameterLayout& layout() const { return layout_; }
  const GptShapes& shapes() const { return shapes_; }
  float* params() { return params_; }  // backend memory, layout().total() floats; null with a ParameterSource
  float* grads() { return grads_; }  // null once a GradientSink is installed
  ActivationBytes activation_bytes() const { return act_bytes_; }
  // Elements of a stage-boundary activation (this rank's rows x hidden).
  int64_t boundary_size() const { return Nl_ * shapes_.C; }
  // Token positions in one micro-batch (B*T).
  int64_t positions() const { return N_; }

  // ---- pipeline interface: one micro-batch through this chunk ----
  // Forward of a micro-batch. `tokens` (host, B*T) feed the embedding on the first chunk; `input`
  // (backend memory, boundary_size()) is the previous chunk's output otherwise. On the head chunk
  // `targets` (host) give the loss; with `with_grad` the head's backward runs at once with the loss
  // of each position weighted by dloss_scale. Returns the slot holding the micro-batch; the head
  // chunk adds the sum of its per-position losses to the loss accumulator (take_loss_sum()).
  int forward(const int32_t* tokens, const float* input, const int32_t* targets, float dloss_scale, bool with_grad);
  // The head chunk's sum of per-position losses since the last call (0 on other chunks), copied to
  // the host (waits for the backend queue); the accumulator restarts at 0.
  double take_loss_sum();
  // This chunk's output activation of the micro-batch in `slot` (not on the head chunk).
  const float* output(int slot) const;
  // Backward of the micro-batch in `slot`: `dout` (boundary_size()) is the gradient of this chunk's
  // output (ignored on the head chunk). Gradients ACCUMULATE into grads(). Returns the gradient of
  // the chunk's input (valid until the next backward; null on the first chunk). Frees the slot.
  const float* backward(int slot, const float* dout);
  // Frees a slot without backward (validation).
  void release(int slot);
  void set_gradient_hooks(GradientHooks hooks) { hooks_ = std::move(hooks); }
  // From now on backward writes through `sink`; the whole-chunk gradient buffer, if any, is freed
  // (grads() becomes null). Call before the first backward.
  void set_gradient_sink(GradientSink* sink);
  // From now on forward and backward read the parameters through `source`; the whole-chunk
  // parameter buffer, if any, is freed (params() becomes null).
  void set_parameter_source(ParameterSource* source);
  // Flat elements [first, second) of layer l's tensors.
  std::pair<int64_t, int64_t> layer_range(int64_t l) const;

  // ---- the whole model at once (pp = 1) ----
  // One micro-batch: forward, loss, backward. Returns the sum of the per-position losses.
  double forward_backward(const int32_t* inputs, const int32_t* targets, float dloss_scale);
  // Forward and loss only (validation): the sum of per-position losses.
  double forward_loss(const int32_t* inputs, const int32_t* targets);

  // Call once after the last micro-batch of a step: with sequence parallelism, the replicated
  // parameters (LayerNorms, position embedding) saw only this rank's tokens, so their gradients are
  // summed over the TP group; a k/v slice replicated on several ranks (tp > kv_heads) is summed over
  // its replicas. Without either this does nothing (needs_finish_gradients()).
  void finish_gradients();
  // The same for the flat elements [begin, end) only, whose gradients are range_grads (ZeRO-2: a DP
  // rank's partition; the TP peers of a DP rank hold the same range).
  void finish_gradients(float* range_grads, int64_t begin, int64_t end);
  bool sequence_parallel() const { return sp_; }
  bool needs_finish_gradients() const;

  // Adds the squared gradients of the flat elements [begin, end) onto sums[0] (tensors sharded over
  // TP) and sums[1] (replicated over TP), two doubles in backend memory; range_grads[k] is the
  // gradient of element begin + k. `skip_wte` leaves out the token embedding (the last stage's
  // duplicate of a tied embedding).
  void add_gradient_square_sums(double* sums, bool skip_wte, const float* range_grads, int64_t begin, int64_t end);
  // Global L2 norm of the gradients of this chunk alone (pp = 1): sharded tensors summed over the
  // TP group, replicated ones counted once.
  double gradient_norm();

  // A whole-chunk (tp = 1 layout) host copy of a parameter-shaped buffer of this model (params(),
  // grads(), or optimizer state), gathered over the TP group; the same on every TP rank.
  std::vector<float> gather_global(const float* buffer);
  const ParameterLayout& global_layout() const { return global_layout_; }

 private:
  struct LayerActs {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *lse, *atty, *x2, *ln2, *ln2_mean, *ln2_rstd, *fch, *fchg;
  };
  // bf16 storage: the bf16 patterns of a layer's rounded activations (the LayerActs fields of the same
  // names then point into the shared work_acts_).
  struct PackedActs {
    uint16_t *ln1, *qkv, *atty, *ln2, *fch, *fchg;
  };
  // Everything one micro-batch in flight keeps between its forward and its backward.
  struct Slot {
    bool busy = false;
    int32_t* tokens = nullptr;         // first chunk: for the embedding's backward
    std::vector<float*> residual;      // layers+1 tensors [Nl, C]: each layer's input, then the output
    std::vector<LayerActs> acts;       // per layer (none, selective); empty for full recompute
    std::vector<PackedActs> packed;    // per layer, bf16 storage (none, selective); else empty
    float* dtop = nullptr;             // head chunk: gradient of the last layer's output
    std::vector<void*> owned;
  };

  float* take(int64_t n, bool saved, std::vector<void*>* owner);
  LayerActs make_layer_acts(bool saved, std::vector<void*>* owner);
  PackedActs make_packed_acts(std::vector<void*>* owner);
  // bf16 storage: layer l's packed activations in the slot, or null (fp32, or full recompute).
  const PackedActs* packed_for(const Slot& s, int64_t l) const;
  // bf16 storage: x rounded in place, and its patterns kept in `packed` when not null. fp32: nothing.
  void keep(float* x, const PackedActs* packed, uint16_t* PackedActs::*field, int64_t n);
  // The same for a norm's or an activation's output, done by the op itself (Kernels::*_rounded, the same
  // bits in one pass fewer): whether to round, and where its patterns go (null: nowhere).
  struct Rounding {
    bool round;
    uint16_t* packed;
  };
  Rounding kept_rounding(const PackedActs* packed, uint16_t* PackedActs::*field) const;
  // Backward's fp32 copies of the packed activations that kernels other than the GEMMs read.
  void unpack(const PackedActs& packed, const LayerActs& a);
  bool backward_reads_values(uint16_t* PackedActs::*field) const;
  // A kept activation as a GEMM input: its values with their patterns (forward), or (backward, after
  // unpack) its patterns alone where backward_reads_values says no fp32 copy was made.
  GemmInput kept(const float* values, const PackedActs* packed, uint16_t* PackedActs::*field) const;
  GemmInput kept_for_backward(const float* values, const PackedActs* packed, uint16_t* PackedActs::*field) const;
  // A norm output (ln_1, ln_2: this rank's rows) as the input of its column-parallel GEMM, in forward or
  // backward: all-gathered under SP, else as kept.
  GemmInput norm_output(const float* local, const PackedActs* packed, uint16_t* PackedActs::*field, bool backward);
  // The activations bf16 storage packs: their LayerActs and PackedActs fields and element counts.
  struct PackedField {
    float* LayerActs::*value;
    uint16_t* PackedActs::*bits;
    int64_t n;
  };
  std::array<PackedField, 6> packed_fields() const;
  int acquire_slot();
  void free_slot(Slot& s);
  const LayerActs& acts_for(const Slot& s, int64_t l) const;
  // The norm a layer's output add is fused with: its output, statistics and parameters (flat offsets,
  // bias -1 for none), and the segment holding them, which the layer acquires for it and the forward
  // loop releases once the norm's own layer (or the head) has run.
  struct NextNorm {
    float *out, *mean, *rstd;
    int64_t weight, bias;
    std::pair<int64_t, int64_t> segment;
    Rounding rounding;  // a layer's ln_1 is kept (bf16: rounded here); ln_f is not
  };
  // In a forward pass, the norm after layer l: layer l + 1's ln_1 in this chunk, or ln_f when l is the
  // chunk's last layer and the chunk holds the head; none for the last layer of a chunk without it.
  std::optional<NextNorm> norm_after(const Slot& s, int64_t l) const;
  // Layer l's forward from residual[i] into residual[i+1] (i = l - layer_begin), with activations in `a`.
  // ln1_done: a.ln1 and its statistics hold ln_1 of the input already (the previous layer's fused add,
  // which acquired this layer's parameters: released here with the layer's own hold);
  // next: the norm fused with the output add (null: the add alone), its segment acquired here.
  void layer_forward(Slot& s, int64_t l, const LayerActs& a, bool ln1_done = false, const NextNorm* next = nullptr);
  void layer_backward(Slot& s, int64_t l, const LayerActs& a);
  // LayerNorm or RMSNorm of this rank's rows (weight, bias: flat offsets; bias -1 for none).
  void norm_forward(float* out, float* mean, float* rstd, const float* x, int64_t weight, int64_t bias,
                    Rounding rounding = {false, nullptr});
  // x += residual, then norm_forward of x, fused (Kernels::residual_layernorm_forward).
  void residual_norm_forward(float* out, float* mean, float* rstd, float* x, const float* residual, int64_t weight,
                             int64_t bias, Rounding rounding = {false, nullptr});
  void norm_backward(float* dx, int64_t weight, int64_t bias, const float* dout, const float* x, const float* mean,
                     const float* rstd);
  void sum_over_replicas(const ParamTensor& t, float* g, int64_t n);
  // Head: final LN, then logits and the vocab-parallel cross-entropy chunk by chunk (losses summed onto
  // loss_sum_); with_grad: each chunk's LM-head backward at once, then the final LN's into s.dtop.
  // lnf_done: lnf_ and its statistics hold ln_f already (the last layer's fused add).
  void head_forward(Slot& s, const int32_t* targets, float dloss_scale, bool with_grad, bool lnf_done);
  // Rows [r0, r0 + n) of the head (n <= head_rows_): logits, loss, and with_grad their gradients.
  void head_rows(int64_t r0, int64_t n, const float* lnf_full, float dloss_scale, bool with_grad);
  // The two TP communication primitives (identity when tp = 1):
  //   to_full:      this rank's [Nl, width] rows -> all N rows (all-gather with SP; else the same buffer)
  //   from_partial: a [N, width] partial sum on every rank -> this rank's reduced rows
  //                 (reduce-scatter into `local` with SP; else all-reduce in place, local == partial)
  const float* to_full(const float* local, int64_t width);
  void from_partial(float* partial, float* local, int64_t width);
  // Where a row-parallel GEMM writes its partial result destined for `local`.
  float* partial_for(float* local) { return sp_ ? partial_ : local; }
  // Positions of this rank's rows: the [B, T] token grid flattened, rows [row0, row0 + Nl).
  void add_positions(float* x);
  void position_grads(float* dwpe, const float* dx);
  // Where backward writes the gradient of flat element `offset`: the whole-chunk buffer, or the
  // open sink segment holding it.
  float* grad(int64_t offset);
  // Where forward and backward read parameter element `offset`: the whole-chunk buffer, or the
  // acquired source segment holding it. Acquisitions of one segment nest (full recompute).
  const float* param(int64_t offset) const;
  // A GEMM weight from element `offset` on: the source's bf16 patterns when it has them (the LM head's
  // weight is then not acquired at all, head_params), else param().
  GemmInput weight(int64_t offset) const;
  std::pair<int64_t, int64_t> head_params() const;  // what the head acquires: ln_f (and the LM head)
  // param() and grad() of a tensor the model may lack (offset -1: null).
  const float* optional_param(int64_t offset) const;
  float* optional_grad(int64_t offset);
  void acquire_params(std::pair<int64_t, int64_t> range);  // no-ops without a source
  void release_params(std::pair<int64_t, int64_t> range);
  void prefetch_params(std::pair<int64_t, int64_t> range);
  void open_grads(int64_t begin, int64_t end);  // no-op without a sink
  void close_grads();                           // closes every open segment

  GptShapes shapes_;
  Kernels& k_;
  Recompute recompute_;
  bool bf16_;                     // bf16 storage of the activations kept for backward
  TensorParallel tp_;
  bool sp_ = false;
  int64_t B_, N_, Nl_, row0_;     // tokens in the micro-batch, rows on this rank, first row
  int64_t Cl_, Fl_, NHl_, Vl_;    // this rank's attention width, MLP width, heads, vocabulary rows
  int64_t KVHl_, QKVl_, FCl_;     // this rank's kv heads, q|k|v width, and c_fc (gate|up) width
  int64_t vocab_begin_, vocab_real_;  // first vocabulary row here, and how many of them are real
  int64_t L0_, nl_;               // first layer of the chunk, layers in it
  int64_t head_rows_ = 0;         // rows of logits at once (ActivationPolicy::logits_chunk_bytes)
  ParameterLayout layout_;
  ParameterLayout global_layout_;
  float* params_ = nullptr;
  float* grads_ = nullptr;
  std::vector<void*> owned_;
  ActivationBytes act_bytes_;
  int64_t slot_bytes_ = 0;  // bytes of the slot being built

  std::vector<std::unique_ptr<Slot>> slots_;
  int32_t* targets_ = nullptr;
  LayerActs full_acts_{};               // full recompute: one set, rebuilt per layer
  LayerActs work_acts_{};               // bf16 storage (none, selective): a layer's unpacked activations
  float* lse_scratch_ = nullptr;        // selective/full: recomputed attention log-sum-exp
  float* atty_scratch_ = nullptr;       // selective: attention output discarded on recompute
  float *lnf_, *lnf_mean_, *lnf_rstd_, *losses_;
  float *logits_, *rowmax_, *sumexp_;   // one chunk of head_rows_ rows (sumexp_: 2 per row, see head_rows)
  float *dres_, *dln_, *dqkv_, *dfch_, *dfchg_;
  float* gathered_ = nullptr;           // SP: [N, C] all-gathered input of a column-parallel GEMM
  float* partial_ = nullptr;            // SP: [N, C] partial output of a row-parallel GEMM / input grad
  double* loss_sum_ = nullptr;          // head chunk: sum of per-position losses, in backend memory
  double* norm_sums_ = nullptr;         // gradient_norm(): {sharded, replicated} squared sums
  float* rope_table_ = nullptr;         // RoPE: [T, HD/2, 2] (cos, sin)
  float* replica_sum_ = nullptr;        // tp > kv_heads: the parts of a k/v gradient, summed over TP
  int64_t replica_sum_size_ = 0;
  GradientHooks hooks_;
  GradientSink* sink_ = nullptr;
  struct OpenSegment {
    int64_t begin, end;
    float* data;
  };
  std::vector<OpenSegment> open_;
  ParameterSource* source_ = nullptr;
  const uint16_t* param_patterns_ = nullptr;  // source_->patterns()
  struct HeldSegment {
    int64_t begin, end;
    const float* data;
    int refs;
  };
  std::vector<HeldSegment> held_;
};

}  // namespace trident
