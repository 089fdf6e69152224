#include "model/hf_config.hpp"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <typeinfo>
#include <vector>

#include "core/error.hpp"
#include "core/regular_file.hpp"

namespace trident {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr size_t kMaxConfigBytes = 1 << 20;

// One key of the config against the deck's value; the differences are collected, then reported together.
class Comparison {
 public:
  Comparison(const json& config, std::string path) : config_(config), path_(std::move(path)) {}

  void integer(const char* key, int64_t fallback, int64_t deck, const char* deck_key) {
    const int64_t theirs = value<int64_t>(key, fallback);
    if (theirs != deck) differ(key, std::to_string(theirs), deck_key, std::to_string(deck));
  }
  void real(const char* key, double fallback, double deck, const char* deck_key) {
    const double theirs = value<double>(key, fallback);
    if (std::abs(theirs - deck) > 1e-9 * std::abs(deck))
      differ(key, fmt::format("{}", theirs), deck_key, fmt::format("{}", deck));
  }
  void boolean(const char* key, bool fallback, bool deck, const char* deck_key) {
    const bool theirs = value<bool>(key, fallback);
    if (theirs != deck) differ(key, theirs ? "true" : "false", deck_key, deck ? "true" : "false");
  }
  void refuse(const std::string& what) { problems_.push_back(what); }

  void report() const {
    if (problems_.empty()) return;
    std::string text;
    for (const auto& p : problems_) text += "\n  " + p;
    throw Error(fmt::format("{}: the model it describes is not the deck's:{}\n(set the deck's keys to the config's, "
                            "or point model.init_from at the weights meant for this deck)",
                            path_, text));
  }

 private:
  template <class T>
  T value(const char* key, T fallback) const {
    const auto it = config_.find(key);
    if (it == config_.end() || it->is_null()) return fallback;
    try {
      return it->get<T>();
    } catch (const json::exception&) {
      throw Error(fmt::format("{}: \"{}\" = {} is not a {}", path_, key, it->dump(), typeid(T) == typeid(bool) ? "boolean" : "number"));
    }
  }
  void differ(const char* key, const std::string& theirs, const char* deck_key, const std::string& ours) {
    problems_.push_back(fmt::format("{} = {}, but [model] {} = {}", key, theirs, deck_key, ours));
  }

  const json& config_;
  std::string path_;
  std::vector<std::string> problems_;
};

void compare_llama(const ModelConfig& m, Comparison& c, const json& j) {
  c.integer("vocab_size", 32000, m.vocab_size, "vocab_size");
  c.integer("hidden_size", 4096, m.hidden, "hidden");
  c.integer("num_hidden_layers", 32, m.layers, "layers");
  c.integer("num_attention_heads", 32, m.heads, "heads");
  c.integer("num_key_value_heads", m.heads, m.kv(), "kv_heads");
  c.integer("intermediate_size", 11008, m.ffn(), "ffn_hidden");
  c.integer("head_dim", m.head_dim(), m.head_dim(), "hidden / heads");
  c.real("rms_norm_eps", 1e-6, m.norm_eps, "norm_eps");
  c.real("rope_theta", 10000.0, m.rope_theta, "rope_theta");
  c.boolean("tie_word_embeddings", false, m.tie_embeddings, "tie_embeddings");
  c.boolean("attention_bias", false, m.bias, "bias");
  c.boolean("mlp_bias", false, m.bias, "bias");
  if (m.norm != Norm::RmsNorm || m.positions != Positions::Rope || m.mlp != Mlp::SwiGlu)
    c.refuse("LlamaForCausalLM computes rmsnorm, rope and swiglu, but the deck has norm, positions, mlp = " +
             fmt::format("{}, {}, {}", to_string(m.norm), to_string(m.positions), to_string(m.mlp)));
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
    c.refuse("rope_scaling = " + j["rope_scaling"].dump() + ": scaled rotary embeddings are not supported");
  if (j.contains("hidden_act") && !(j["hidden_act"].is_string() && j["hidden_act"] == "silu"))
    c.refuse("hidden_act = " + j["hidden_act"].dump() + ": trident's SwiGLU uses silu");
}

void compare_gpt2(const ModelConfig& m, Comparison& c, const json& j) {
  c.integer("vocab_size", 50257, m.vocab_size, "vocab_size");
  c.integer("n_embd", 768, m.hidden, "hidden");
  c.integer("n_layer", 12, m.layers, "layers");
  c.integer("n_head", 12, m.heads, "heads");
  c.integer("n_inner", 4 * m.hidden, m.ffn(), "ffn_hidden");
  c.real("layer_norm_epsilon", 1e-5, m.norm_eps, "norm_eps");
  c.boolean("tie_word_embeddings", true, m.tie_embeddings, "tie_embeddings");
  if (j.contains("n_positions") && j["n_positions"].is_number_integer() && j["n_positions"].get<int64_t>() < m.seq_len)
    c.refuse(fmt::format("n_positions = {}: fewer learned positions than [model] seq_len = {}",
                         j["n_positions"].get<int64_t>(), m.seq_len));
  const std::string act = j.contains("activation_function") && j["activation_function"].is_string()
                              ? j["activation_function"].get<std::string>()
                              : std::string("gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    c.refuse("activation_function = \"" + act + "\": trident's GELU is the tanh approximation (gelu_new)");
}

}  // namespace

std::string hf_config_path(const std::string& init_from) {
  std::error_code ec;
  const fs::path p(init_from);
  const fs::path config = fs::is_directory(p, ec) ? p / "config.json" : p.parent_path() / "config.json";
  return fs::exists(config, ec) ? config.string() : std::string();
}

void check_hf_config(const ModelConfig& m, const std::string& init_from) {
  const std::string path = hf_config_path(init_from);
  if (path.empty()) return;
  json j;
  try {
    j = json::parse(read_small_file(path, kMaxConfigBytes));
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: not a JSON config ({})", path, e.what()));
  }
  if (!j.is_object()) throw Error(fmt::format("{}: not a JSON object", path));
  if (!j.contains("model_type") || !j["model_type"].is_string())
    throw Error(fmt::format("{}: no \"model_type\" string (\"gpt2\" or \"llama\")", path));
  const std::string type = j["model_type"].get<std::string>();
  const bool llama = m.architecture == Architecture::Llama;
  if (type != (llama ? "llama" : "gpt2"))
    throw Error(fmt::format("{}: model_type \"{}\", but [model] architecture = \"{}\" reads {} weights", path, type,
                            to_string(m.architecture), llama ? "\"llama\"" : "\"gpt2\""));
  Comparison c(j, path);
  if (llama) {
    compare_llama(m, c, j);
  } else {
    compare_gpt2(m, c, j);
  }
  c.report();
}

}  // namespace trident
