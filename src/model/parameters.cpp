#include "model/parameters.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "core/error.hpp"
#include "io/safetensors.hpp"

namespace trident {

ParameterLayout::ParameterLayout(const GptShapes& s) : shapes_(s) {
  const int64_t C = s.C, F = s.F;
  wte_ = add("transformer.wte.weight", {s.Vp, C}, ParamKind::Embedding);
  wpe_ = add("transformer.wpe.weight", {s.T, C}, ParamKind::Embedding);
  for (int64_t l = 0; l < s.L; ++l) {
    const std::string p = fmt::format("transformer.h.{}.", l);
    LayerParams lp{};
    lp.ln1_w = add(p + "ln_1.weight", {C}, ParamKind::NormWeight);
    lp.ln1_b = add(p + "ln_1.bias", {C}, ParamKind::NormBias);
    lp.qkv_w = add(p + "attn.c_attn.weight", {3 * C, C}, ParamKind::Weight, true);
    lp.qkv_b = add(p + "attn.c_attn.bias", {3 * C}, ParamKind::Bias);
    lp.attn_proj_w = add(p + "attn.c_proj.weight", {C, C}, ParamKind::Weight, true, true);
    lp.attn_proj_b = add(p + "attn.c_proj.bias", {C}, ParamKind::Bias);
    lp.ln2_w = add(p + "ln_2.weight", {C}, ParamKind::NormWeight);
    lp.ln2_b = add(p + "ln_2.bias", {C}, ParamKind::NormBias);
    lp.fc_w = add(p + "mlp.c_fc.weight", {F, C}, ParamKind::Weight, true);
    lp.fc_b = add(p + "mlp.c_fc.bias", {F}, ParamKind::Bias);
    lp.fc_proj_w = add(p + "mlp.c_proj.weight", {C, F}, ParamKind::Weight, true, true);
    lp.fc_proj_b = add(p + "mlp.c_proj.bias", {C}, ParamKind::Bias);
    layers_.push_back(lp);
  }
  lnf_w_ = add("transformer.ln_f.weight", {C}, ParamKind::NormWeight);
  lnf_b_ = add("transformer.ln_f.bias", {C}, ParamKind::NormBias);
  lm_head_ = s.tied ? wte_ : add("lm_head.weight", {s.Vp, C}, ParamKind::Embedding);
}

int64_t ParameterLayout::add(std::string name, std::vector<int64_t> shape, ParamKind kind, bool conv1d,
                             bool residual_projection) {
  ParamTensor t;
  t.name = std::move(name);
  t.shape = std::move(shape);
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

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// Rows of the stored tensor that are real (not vocabulary padding).
int64_t real_rows(const ParamTensor& t, const GptShapes& s) {
  return t.kind == ParamKind::Embedding && t.shape[0] == s.Vp ? s.V : t.shape[0];
}

}  // namespace

float init_normal(uint64_t seed, const std::string& name, int64_t index) {
  // Counter-based: a hash of (seed, name, index), so any slice can be generated independently.
  const uint64_t key = splitmix64(seed ^ fnv1a(name));
  const double u1 = ((splitmix64(key + 2 * uint64_t(index)) >> 11) + 1) * 0x1.0p-53;  // (0, 1]
  const double u2 = (splitmix64(key + 2 * uint64_t(index) + 1) >> 11) * 0x1.0p-53;   // [0, 1)
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

void init_parameters(const ParameterLayout& layout, double std, uint64_t seed, float* host) {
  const auto& s = layout.shapes();
  std::memset(host, 0, sizeof(float) * layout.total());
  for (const auto& t : layout.tensors()) {
    float* p = host + t.offset;
    switch (t.kind) {
      case ParamKind::NormWeight:
        for (int64_t i = 0; i < t.numel; ++i) p[i] = 1.0f;
        break;
      case ParamKind::Bias:
      case ParamKind::NormBias:
        break;
      case ParamKind::Weight:
      case ParamKind::Embedding: {
        const double sd = t.residual_projection ? std / std::sqrt(2.0 * s.L) : std;
        const int64_t n = real_rows(t, s) * (t.numel / t.shape[0]);
        for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(sd * init_normal(seed, t.name, i));
        break;
      }
    }
  }
}

namespace {

// Hugging Face checkpoints saved from GPT2Model have no "transformer." prefix; accept both.
std::string hf_name_in(const SafetensorsReader& f, const std::string& name) {
  if (f.has(name)) return name;
  const std::string prefix = "transformer.";
  if (name.rfind(prefix, 0) == 0 && f.has(name.substr(prefix.size()))) return name.substr(prefix.size());
  throw Error(fmt::format("{}: tensor {} is missing", f.path(), name));
}

std::vector<int64_t> hf_shape(const ParamTensor& t, const GptShapes& s) {
  if (t.conv1d) return {t.shape[1], t.shape[0]};
  if (t.shape.size() == 2) return {real_rows(t, s), t.shape[1]};
  return t.shape;
}

}  // namespace

void load_hf_safetensors(const ParameterLayout& layout, const std::string& path, float* host) {
  SafetensorsReader f(path);
  const auto& s = layout.shapes();
  std::memset(host, 0, sizeof(float) * layout.total());
  for (const auto& t : layout.tensors()) {
    const auto shape = hf_shape(t, s);
    const auto data = f.read_f32(hf_name_in(f, t.name), shape);
    float* p = host + t.offset;
    if (t.conv1d) {  // [in, out] -> [out, in]
      const int64_t in = shape[0], out = shape[1];
      for (int64_t i = 0; i < in; ++i)
        for (int64_t o = 0; o < out; ++o) p[o * in + i] = data[i * out + o];
    } else {
      std::memcpy(p, data.data(), sizeof(float) * data.size());
    }
  }
}

void save_hf_safetensors(const ParameterLayout& layout, const float* host, const std::string& path) {
  const auto& s = layout.shapes();
  std::vector<std::vector<float>> transposed;
  std::vector<SafetensorsTensor> out;
  transposed.reserve(layout.tensors().size());
  for (const auto& t : layout.tensors()) {
    const float* p = host + t.offset;
    const auto shape = hf_shape(t, s);
    if (t.conv1d) {
      const int64_t in = shape[0], o = shape[1];
      auto& buf = transposed.emplace_back(t.numel);
      for (int64_t i = 0; i < in; ++i)
        for (int64_t j = 0; j < o; ++j) buf[i * o + j] = p[j * in + i];
      p = buf.data();
    }
    out.push_back({t.name, shape, p});
  }
  write_safetensors(path, out, {{"format", "pt"}, {"producer", "trident"}});
}

}  // namespace trident
