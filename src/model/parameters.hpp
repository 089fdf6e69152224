#pragma once
// The model's parameter tensors: their Hugging Face names (GPT-2's or Llama's, by model.architecture),
// shapes and places in one flat buffer.
// Parameters, gradients and both Adam moments share this layout, so the optimizer and the
// communication layer work on flat ranges.
//
// Storage layout is PyTorch Linear's [out, in]. Hugging Face GPT-2 stores its Conv1D weights
// (c_attn, c_proj, c_fc) as [in, out]; import and export transpose them. The token embedding is
// stored padded to [Vp, C]; the padding rows stay zero and never leave the process. Llama's q_proj,
// k_proj and v_proj (and gate_proj, up_proj) are separate tensors laid out one after the other, so a
// rank's slices of them form one fused [q | k | v] (and [gate | up]) weight for a single GEMM.
#include <cstdint>
#include <string>
#include <vector>

#include "model/shapes.hpp"

namespace trident {

enum class ParamKind { Embedding, PositionEmbedding, Weight, Bias, NormWeight, NormBias };

// How a tensor is divided among the ranks of a TP group (Megatron-style).
enum class TpSplit {
  None,     // replicated: LayerNorms, position embedding, row-parallel biases
  Rows,     // dim 0 split: vocab-parallel embedding / LM head, column-parallel c_fc weight and bias; Llama's
            // q/k/v and gate/up projections (k and v in tp/replicas parts when the kv heads are fewer than tp)
  Cols,     // dim 1 split: row-parallel attn.c_proj and mlp.c_proj weights
  QkvRows,  // each of the q, k, v row blocks split by heads: the fused c_attn weight and bias
};

struct ParamTensor {
  std::string name;              // Hugging Face name, e.g. "transformer.h.3.attn.c_attn.weight"
  std::vector<int64_t> shape;    // stored shape on this rank ([out, in] for matrices; [Vp/tp, C] for wte)
  std::vector<int64_t> global_shape;  // stored shape of the whole tensor (tp = 1)
  TpSplit split = TpSplit::None;
  int64_t offset = 0;            // into the flat buffer, in floats
  int64_t numel = 0;
  ParamKind kind = ParamKind::Weight;
  bool conv1d = false;           // Hugging Face stores it transposed ([in, out])
  bool residual_projection = false;  // attn.c_proj / mlp.c_proj weights: init std / sqrt(2L)
  // Rows split only: TP ranks holding the same slice (k_proj and v_proj when tp > kv_heads: rank r holds
  // part r / replicas). Their gradients are summed over those ranks; checkpoints take rank r % replicas == 0's.
  int replicas = 1;
  int part(int tp_rank) const { return tp_rank / replicas; }

  // AdamW weight decay applies to tensors of 2 or more dimensions (matrices and embeddings).
  bool decayed() const { return shape.size() >= 2; }
  // A bf16 working copy keeps what the model reads in fp32 as its fp32 masters: the 1-D tensors (biases,
  // norm weights and biases) and the position embedding (model/fp32_tensors.hpp).
  bool kept_in_fp32() const { return shape.size() == 1 || kind == ParamKind::PositionEmbedding; }
};

// Offsets of one layer's tensors, to address them without name lookups; -1 for tensors the model does
// not have (biases without model.bias, LayerNorm biases with RMSNorm). qkv_w is the fused [q | k | v]
// weight (c_attn, or q_proj followed by k_proj and v_proj), fc_w the fused [gate | up] (or c_fc).
// A layer's tensors are contiguous: flat elements [begin, end).
struct LayerParams {
  int64_t ln1_w, ln1_b, qkv_w, qkv_b, attn_proj_w, attn_proj_b, ln2_w, ln2_b, fc_w, fc_b, fc_proj_w, fc_proj_b;
  int64_t begin, end;
};

// The part of the model a pipeline chunk holds: layers [layer_begin, layer_end), plus the embedding
// on the first chunk and the final LayerNorm and LM head on the last (with tied embeddings the last
// chunk also holds the token embedding, as the head's weight).
struct ChunkSpec {
  int64_t layer_begin = 0;
  int64_t layer_end = -1;  // -1: all layers
  bool embedding = true;
  bool head = true;
  static ChunkSpec whole_model() { return {}; }
};

class ParameterLayout {
 public:
  // The tensors of `chunk` held by rank `tp_rank` of a TP group of `tp_size` (the whole model when
  // tp_size = 1 and chunk is whole_model()).
  explicit ParameterLayout(const GptShapes& s, int tp_rank = 0, int tp_size = 1,
                           ChunkSpec chunk = ChunkSpec::whole_model());

  const GptShapes& shapes() const { return shapes_; }
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  const ParamTensor& find(const std::string& name) const;
  int64_t total() const { return total_; }
  int tp_rank() const { return tp_rank_; }
  int tp_size() const { return tp_size_; }
  // Rows [vocab_begin, vocab_begin + Vp/tp) of the padded vocabulary live on this rank.
  int64_t vocab_begin() const { return tp_rank_ * shapes_.Vp / tp_size_; }

  const ChunkSpec& chunk() const { return chunk_; }
  int64_t layer_begin() const { return chunk_.layer_begin; }
  int64_t layer_end() const { return chunk_.layer_end; }
  bool has_embedding() const { return chunk_.embedding; }
  bool has_head() const { return chunk_.head; }

  // Offsets (in floats) into the flat buffer; -1 for tensors this chunk does not hold.
  int64_t wte() const { return wte_; }
  int64_t wpe() const { return wpe_; }
  int64_t lnf_w() const { return lnf_w_; }
  int64_t lnf_b() const { return lnf_b_; }
  int64_t lm_head() const { return lm_head_; }  // == wte() when tied
  // The token embedding's name ("transformer.wte.weight", "model.embed_tokens.weight").
  std::string wte_name() const { return shapes_.arch == Architecture::Llama ? "model.embed_tokens.weight" : "transformer.wte.weight"; }
  // Layer l by its global index (layer_begin() <= l < layer_end()).
  const LayerParams& layer(int64_t l) const { return layers_[l - chunk_.layer_begin]; }

 private:
  int64_t add(std::string name, std::vector<int64_t> global_shape, ParamKind kind, TpSplit split,
              bool conv1d = false, bool residual_projection = false, int replicas = 1);
  void add_gpt2_tensors();
  void add_llama_tensors();

  GptShapes shapes_;
  int tp_rank_ = 0, tp_size_ = 1;
  ChunkSpec chunk_;
  std::vector<ParamTensor> tensors_;
  std::vector<LayerParams> layers_;
  int64_t total_ = 0;
  int64_t wte_ = -1, wpe_ = -1, lnf_w_ = -1, lnf_b_ = -1, lm_head_ = -1;
};

// GPT-2 initialisation into a host buffer of layout.total() floats: weights and embeddings
// N(0, std), residual projections N(0, std/sqrt(2L)), biases 0, LayerNorm weights 1, padding 0.
// Every element is a function of (seed, tensor name, element index in the whole tensor) alone, so a
// layout of any TP rank and pipeline chunk generates exactly its slice of the serial run's model,
// without the rest of the model ever existing on the rank (src/model/parameter_init.cpp).
void init_parameters(const ParameterLayout& layout, double std, uint64_t seed, float* host_params);

// The initial values of elements [begin, end) of tensor t as stored by TP rank tp_rank (t from that
// rank's layout; indices into t's local storage), into out[0, end - begin). s: the layout's shapes.
// Any sub-range can be generated on its own (a ZeRO-3 partition, one tensor at a time at start-up).
void init_tensor_elements(const ParamTensor& t, const GptShapes& s, int tp_rank, double std, uint64_t seed,
                          int64_t begin, int64_t end, float* out);

// The initial values of elements [begin, end) of a layout's flat buffer, into out[0, end - begin).
void init_parameter_range(const ParameterLayout& layout, double std, uint64_t seed, int64_t begin, int64_t end,
                          float* out);

// The normal deviate used for element `index` of tensor `name` (exposed for sharded initialisation).
float init_normal(uint64_t seed, const std::string& name, int64_t index);

// Loads Hugging Face weights of the layout's architecture (safetensors: a file, an index json or a directory) into a host buffer of layout.total() floats;
// throws naming the tensor that is missing or mis-shaped. The layout may be any TP rank's chunk: only
// its slices are read from the file (src/model/hf_import.cpp).
void load_hf_safetensors(const ParameterLayout& layout, const std::string& path, float* host_params);

class SafetensorsSet;
// Tensor t's slice held by TP rank layout.tp_rank() (t from `layout`), read from open Hugging Face
// weights (one file or shards) into out[0, t.numel) (padding rows zero). Reads only the slice's
// rows/columns, from the one shard holding the tensor.
void load_hf_tensor(const SafetensorsSet& weights, const ParameterLayout& layout, const ParamTensor& t, float* out);

// Writes the parameters as a Hugging Face safetensors file (unpadded; GPT-2's Conv1D layout).
void save_hf_safetensors(const ParameterLayout& layout, const float* host_params, const std::string& path);

// Tensor `t` of a whole-model (tp = 1) buffer in Hugging Face shape and layout: unpadded, Conv1D
// tensors transposed to [in, out].
std::vector<float> hf_tensor(const ParameterLayout& layout, const float* host_params, const ParamTensor& t);
std::vector<int64_t> hf_shape(const ParamTensor& t, const GptShapes& s);

// Calls copy(global_offset, local_offset, count) for each contiguous run of rank `local`'s slice of
// tensor t inside the whole tensor (both offsets relative to the tensor's start).
template <class Copy>
void for_each_slice_run(const ParamTensor& t, int tp_rank, Copy copy) {
  const int64_t rows = t.shape[0];
  const int64_t cols = t.shape.size() > 1 ? t.shape[1] : 1;
  const int64_t global_cols = t.global_shape.size() > 1 ? t.global_shape[1] : 1;
  switch (t.split) {
    case TpSplit::None:
      copy(0, 0, t.numel);
      break;
    case TpSplit::Rows:
      copy(t.part(tp_rank) * rows * cols, 0, rows * cols);
      break;
    case TpSplit::Cols:
      for (int64_t r = 0; r < rows; ++r) copy(r * global_cols + tp_rank * cols, r * cols, cols);
      break;
    case TpSplit::QkvRows: {
      const int64_t block = rows / 3, global_block = t.global_shape[0] / 3;  // rows of q (or k, v)
      for (int64_t b = 0; b < 3; ++b)
        copy((b * global_block + tp_rank * block) * cols, b * block * cols, block * cols);
      break;
    }
  }
}

// Copies this rank's slices out of a whole-model buffer (global: tp_size 1) into a sharded one.
void shard_parameters(const ParameterLayout& global, const float* global_host, const ParameterLayout& local,
                      float* local_host);
// The inverse: writes this rank's slices into their places in a whole-model buffer.
void unshard_parameters(const ParameterLayout& local, const float* local_host, const ParameterLayout& global,
                        float* global_host);

}  // namespace trident
