#include "model/parameters.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "core/error.hpp"
#include "safetensors/safetensors.hpp"

namespace trident {

ParameterLayout::ParameterLayout(const GptShapes& s, int tp_rank, int tp_size, ChunkSpec chunk)
    : shapes_(s), tp_rank_(tp_rank), tp_size_(tp_size), chunk_(chunk) {
  if (chunk_.layer_end < 0) chunk_.layer_end = s.L;
  if (s.arch == Architecture::Llama) {
    add_llama_tensors();
  } else {
    add_gpt2_tensors();
  }
}

void ParameterLayout::add_gpt2_tensors() {
  const GptShapes& s = shapes_;
  const int64_t C = s.C, F = s.F;
  using K = ParamKind;
  using S = TpSplit;
  if (chunk_.embedding || (chunk_.head && s.tied))
    wte_ = add("transformer.wte.weight", {s.Vp, C}, K::Embedding, S::Rows);
  if (chunk_.embedding) wpe_ = add("transformer.wpe.weight", {s.T, C}, K::PositionEmbedding, S::None);
  for (int64_t l = chunk_.layer_begin; l < chunk_.layer_end; ++l) {
    const std::string p = fmt::format("transformer.h.{}.", l);
    LayerParams lp{};
    lp.begin = total_;
    lp.ln1_w = add(p + "ln_1.weight", {C}, K::NormWeight, S::None);
    lp.ln1_b = add(p + "ln_1.bias", {C}, K::NormBias, S::None);
    lp.qkv_w = add(p + "attn.c_attn.weight", {3 * C, C}, K::Weight, S::QkvRows, true);
    lp.qkv_b = add(p + "attn.c_attn.bias", {3 * C}, K::Bias, S::QkvRows);
    lp.attn_proj_w = add(p + "attn.c_proj.weight", {C, C}, K::Weight, S::Cols, true, true);
    lp.attn_proj_b = add(p + "attn.c_proj.bias", {C}, K::Bias, S::None);
    lp.ln2_w = add(p + "ln_2.weight", {C}, K::NormWeight, S::None);
    lp.ln2_b = add(p + "ln_2.bias", {C}, K::NormBias, S::None);
    lp.fc_w = add(p + "mlp.c_fc.weight", {F, C}, K::Weight, S::Rows, true);
    lp.fc_b = add(p + "mlp.c_fc.bias", {F}, K::Bias, S::Rows);
    lp.fc_proj_w = add(p + "mlp.c_proj.weight", {C, F}, K::Weight, S::Cols, true, true);
    lp.fc_proj_b = add(p + "mlp.c_proj.bias", {C}, K::Bias, S::None);
    lp.end = total_;
    layers_.push_back(lp);
  }
  if (chunk_.head) {
    lnf_w_ = add("transformer.ln_f.weight", {C}, K::NormWeight, S::None);
    lnf_b_ = add("transformer.ln_f.bias", {C}, K::NormBias, S::None);
    lm_head_ = s.tied ? wte_ : add("lm_head.weight", {s.Vp, C}, K::Embedding, S::Rows);
  }
}

// Hugging Face LlamaForCausalLM's names. The components a Llama lacks (LayerNorm biases, biases of the
// linear layers, learned positions, GELU's single c_fc) are there when the deck asks for them, under
// names in the same style.
void ParameterLayout::add_llama_tensors() {
  const GptShapes& s = shapes_;
  const int64_t C = s.C, F = s.F, q_rows = s.NH * s.HD, kv_rows = s.KVH * s.HD;
  const int kv_replicas = tp_size_ > s.KVH ? int(tp_size_ / s.KVH) : 1;
  using K = ParamKind;
  using S = TpSplit;
  // A norm's weight, and its bias for a LayerNorm with biases.
  const auto norm = [&](const std::string& name, int64_t* weight, int64_t* bias) {
    *weight = add(name + ".weight", {C}, K::NormWeight, S::None);
    *bias = s.norm_bias() ? add(name + ".bias", {C}, K::NormBias, S::None) : -1;
  };
  if (chunk_.embedding || (chunk_.head && s.tied))
    wte_ = add("model.embed_tokens.weight", {s.Vp, C}, K::Embedding, S::Rows);
  if (chunk_.embedding && !s.rope) wpe_ = add("model.embed_positions.weight", {s.T, C}, K::PositionEmbedding, S::None);
  for (int64_t l = chunk_.layer_begin; l < chunk_.layer_end; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    LayerParams lp{};
    lp.begin = total_;
    norm(p + "input_layernorm", &lp.ln1_w, &lp.ln1_b);
    lp.qkv_w = add(p + "self_attn.q_proj.weight", {q_rows, C}, K::Weight, S::Rows);
    add(p + "self_attn.k_proj.weight", {kv_rows, C}, K::Weight, S::Rows, false, false, kv_replicas);
    add(p + "self_attn.v_proj.weight", {kv_rows, C}, K::Weight, S::Rows, false, false, kv_replicas);
    lp.qkv_b = -1;
    if (s.bias) {
      lp.qkv_b = add(p + "self_attn.q_proj.bias", {q_rows}, K::Bias, S::Rows);
      add(p + "self_attn.k_proj.bias", {kv_rows}, K::Bias, S::Rows, false, false, kv_replicas);
      add(p + "self_attn.v_proj.bias", {kv_rows}, K::Bias, S::Rows, false, false, kv_replicas);
    }
    lp.attn_proj_w = add(p + "self_attn.o_proj.weight", {C, q_rows}, K::Weight, S::Cols, false, true);
    lp.attn_proj_b = s.bias ? add(p + "self_attn.o_proj.bias", {C}, K::Bias, S::None) : -1;
    norm(p + "post_attention_layernorm", &lp.ln2_w, &lp.ln2_b);
    if (s.swiglu) {
      lp.fc_w = add(p + "mlp.gate_proj.weight", {F, C}, K::Weight, S::Rows);
      add(p + "mlp.up_proj.weight", {F, C}, K::Weight, S::Rows);
      lp.fc_b = -1;
      if (s.bias) {
        lp.fc_b = add(p + "mlp.gate_proj.bias", {F}, K::Bias, S::Rows);
        add(p + "mlp.up_proj.bias", {F}, K::Bias, S::Rows);
      }
    } else {
      lp.fc_w = add(p + "mlp.up_proj.weight", {F, C}, K::Weight, S::Rows);
      lp.fc_b = s.bias ? add(p + "mlp.up_proj.bias", {F}, K::Bias, S::Rows) : -1;
    }
    lp.fc_proj_w = add(p + "mlp.down_proj.weight", {C, F}, K::Weight, S::Cols, false, true);
    lp.fc_proj_b = s.bias ? add(p + "mlp.down_proj.bias", {C}, K::Bias, S::None) : -1;
    lp.end = total_;
    layers_.push_back(lp);
  }
  if (chunk_.head) {
    norm("model.norm", &lnf_w_, &lnf_b_);
    lm_head_ = s.tied ? wte_ : add("lm_head.weight", {s.Vp, C}, K::Embedding, S::Rows);
  }
}

int64_t ParameterLayout::add(std::string name, std::vector<int64_t> global_shape, ParamKind kind, TpSplit split,
                             bool conv1d, bool residual_projection, int replicas) {
  ParamTensor t;
  t.name = std::move(name);
  t.global_shape = global_shape;
  t.shape = std::move(global_shape);
  t.split = split;
  t.replicas = replicas;
  const int64_t dim = split == TpSplit::Cols ? 1 : 0;
  if (split != TpSplit::None) {
    const int parts = tp_size_ / replicas;
    TRIDENT_CHECK(tp_size_ % replicas == 0 && t.shape[dim] % parts == 0,
                  "{}: dimension {} of size {} is not divisible by tp = {} ({} replicas)", t.name, dim, t.shape[dim],
                  tp_size_, replicas);
    t.shape[dim] /= parts;
  }
  t.numel = 1;
  for (auto d : t.shape) t.numel *= d;
  t.offset = total_;
  t.kind = kind;
  t.conv1d = conv1d;
  t.residual_projection = residual_projection;
  total_ += t.numel;
  tensors_.push_back(std::move(t));
  return tensors_.back().offset;
}

const ParamTensor& ParameterLayout::find(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return t;
  TRIDENT_FAIL("no parameter named {}", name);
}

namespace {

// Rows of the stored tensor that are real (not vocabulary padding).
int64_t real_rows(const ParamTensor& t, const GptShapes& s) {
  return t.kind == ParamKind::Embedding && t.shape[0] == s.Vp ? s.V : t.shape[0];
}

}  // namespace

std::vector<int64_t> hf_shape(const ParamTensor& t, const GptShapes& s) {
  if (t.conv1d) return {t.shape[1], t.shape[0]};
  if (t.shape.size() == 2) return {real_rows(t, s), t.shape[1]};
  return t.shape;
}

std::vector<float> hf_tensor(const ParameterLayout& layout, const float* host, const ParamTensor& t) {
  TRIDENT_CHECK(layout.tp_size() == 1, "hf_tensor needs the whole model (tp_size 1), not a shard");
  const auto shape = hf_shape(t, layout.shapes());
  const float* p = host + t.offset;
  if (!t.conv1d) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return std::vector<float>(p, p + n);
  }
  const int64_t in = shape[0], out = shape[1];
  std::vector<float> buf(t.numel);
  for (int64_t i = 0; i < in; ++i)
    for (int64_t o = 0; o < out; ++o) buf[i * out + o] = p[o * in + i];
  return buf;
}

void save_hf_safetensors(const ParameterLayout& layout, const float* host, const std::string& path) {
  std::vector<std::vector<float>> data;
  std::vector<SafetensorsTensor> out;
  data.reserve(layout.tensors().size());
  for (const auto& t : layout.tensors()) {
    data.push_back(hf_tensor(layout, host, t));
    out.push_back({t.name, hf_shape(t, layout.shapes()), data.back().data()});
  }
  write_safetensors(path, out, {{"format", "pt"}, {"producer", "trident"}});
}

void shard_parameters(const ParameterLayout& global, const float* global_host, const ParameterLayout& local,
                      float* local_host) {
  for (const auto& t : local.tensors()) {
    const float* src = global_host + global.find(t.name).offset;  // `global` may be the whole model
    float* dst = local_host + t.offset;
    for_each_slice_run(t, local.tp_rank(), [&](int64_t g, int64_t l, int64_t n) {
      std::memcpy(dst + l, src + g, sizeof(float) * n);
    });
  }
}

void unshard_parameters(const ParameterLayout& local, const float* local_host, const ParameterLayout& global,
                        float* global_host) {
  for (const auto& t : local.tensors()) {
    const float* src = local_host + t.offset;
    float* dst = global_host + global.find(t.name).offset;
    for_each_slice_run(t, local.tp_rank(), [&](int64_t g, int64_t l, int64_t n) {
      std::memcpy(dst + g, src + l, sizeof(float) * n);
    });
  }
}

}  // namespace trident
