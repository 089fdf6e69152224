// The serial checkpoint tools behind `trident ckpt`: verify, export, describe.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/checksum.hpp"
#include "checkpoint/format.hpp"
#include "checkpoint/h5.hpp"
#include "checkpoint/manifest.hpp"
#include "core/output_file.hpp"
#include "safetensors/safetensors.hpp"
#include "text/hf_tokenizer_files.hpp"

namespace fs = std::filesystem;

namespace trident {

using ckpt::h5::Handle;

std::vector<DatasetVerdict> verify_checkpoint(const std::string& path) {
  const CheckpointHeader h = read_checkpoint_header(path);
  Handle file = ckpt::h5::open_file(path, MPI_COMM_NULL);
  std::vector<DatasetVerdict> out;
  {
    DatasetVerdict v;
    v.dataset = ckpt::kDeckDataset;
    v.expected = h.deck_checksum;
    for (size_t i = 0; i < h.deck.size(); ++i) v.actual += ckpt::element_hash(i, uint8_t(h.deck[i]));
    v.ok = v.actual == v.expected;
    out.push_back(v);
  }
  for (const auto& d : h.datasets) {
    DatasetVerdict v;
    v.dataset = d.name;
    v.expected = d.checksum;
    try {
      const std::string what = fmt::format("{}: dataset {}", path, d.name);
      Handle ds = ckpt::h5::open_dataset(file, d.name, path);
      v.actual = ckpt::checksum_rows(ds, d.shape, 0, d.shape[0], H5P_DEFAULT, what);
      v.ok = v.actual == v.expected;
    } catch (const CheckpointError& e) {
      v.error = e.what();
    }
    out.push_back(v);
  }
  return out;
}

namespace {

herr_t add_tensor_extent(hid_t loc, const char* name, const H5O_info_t* info, void* data) {
  if (info->type != H5O_TYPE_DATASET || ("/" + std::string(name)) == ckpt::kDeckDataset) return 0;
  Handle d(H5Dopen2(loc, name, H5P_DEFAULT), H5Dclose);
  static_cast<std::vector<ckpt::Extent>*>(data)->push_back(
      {int64_t(H5Dget_offset(d)), int64_t(H5Dget_storage_size(d))});
  return 0;
}

}  // namespace

void ckpt::reseal_checkpoint(const std::string& path) {
  std::vector<Extent> data;
  int64_t step = 0;
  hsize_t user_block = 0;
  {
    Handle file = h5::open_file(path, MPI_COMM_NULL);
    Handle fcpl(H5Fget_create_plist(file), H5Pclose);
    if (H5Pget_userblock(fcpl, &user_block) < 0) h5::fail(path + ": cannot read the user block size");
    step = h5::read_attr_i64(file, "step", path + ": /");
    if (H5Ovisit(file, H5_INDEX_NAME, H5_ITER_INC, add_tensor_extent, &data) < 0)
      h5::fail(path + ": cannot list the datasets");
  }
  seal_checkpoint(path, step, int64_t(user_block), std::move(data));
}

namespace {

nlohmann::ordered_json gpt2_config(const ModelConfig& m) {
  nlohmann::ordered_json j;
  const int64_t inner = m.ffn();
  j["architectures"] = {"GPT2LMHeadModel"};
  j["model_type"] = "gpt2";
  j["vocab_size"] = m.vocab_size;
  j["n_positions"] = m.seq_len;
  j["n_ctx"] = m.seq_len;
  j["n_embd"] = m.hidden;
  j["n_layer"] = m.layers;
  j["n_head"] = m.heads;
  j["n_inner"] = inner == 4 * m.hidden ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(inner);
  j["activation_function"] = "gelu_new";
  j["layer_norm_epsilon"] = m.norm_eps;
  j["initializer_range"] = m.init_std;
  // trident trains without dropout.
  j["resid_pdrop"] = 0.0;
  j["embd_pdrop"] = 0.0;
  j["attn_pdrop"] = 0.0;
  j["scale_attn_weights"] = true;
  j["tie_word_embeddings"] = m.tie_embeddings;
  j["use_cache"] = true;
  return j;
}

// Hugging Face's LlamaForCausalLM (transformers' LlamaConfig keys). Its rotary embedding is the
// rotate-half form trident computes (kernels.hpp), so q_proj and k_proj go out as trident holds them.
nlohmann::ordered_json llama_config(const ModelConfig& m) {
  if (m.norm != Norm::RmsNorm || m.positions != Positions::Rope || m.mlp != Mlp::SwiGlu)
    throw CheckpointError(fmt::format(
        "this model is not one Hugging Face's LlamaForCausalLM computes (norm {}, positions {}, mlp {}; it needs "
        "rmsnorm, rope and swiglu); not exported",
        to_string(m.norm), to_string(m.positions), to_string(m.mlp)));
  nlohmann::ordered_json j;
  j["architectures"] = {"LlamaForCausalLM"};
  j["model_type"] = "llama";
  j["vocab_size"] = m.vocab_size;
  j["max_position_embeddings"] = m.seq_len;
  j["hidden_size"] = m.hidden;
  j["intermediate_size"] = m.ffn();
  j["num_hidden_layers"] = m.layers;
  j["num_attention_heads"] = m.heads;
  j["num_key_value_heads"] = m.kv();
  j["head_dim"] = m.hidden / m.heads;
  j["hidden_act"] = "silu";
  j["rms_norm_eps"] = m.norm_eps;
  j["rope_theta"] = m.rope_theta;
  j["rope_scaling"] = nullptr;
  j["attention_bias"] = m.bias;
  j["mlp_bias"] = m.bias;
  j["attention_dropout"] = 0.0;
  j["initializer_range"] = m.init_std;
  j["tie_word_embeddings"] = m.tie_embeddings;
  j["use_cache"] = true;
  return j;
}

}  // namespace

std::string hf_config_json(const ModelConfig& m, Tokenizer tokenizer, bool bf16) {
  nlohmann::ordered_json j = m.architecture == Architecture::Llama ? llama_config(m) : gpt2_config(m);
  if (tokenizer == Tokenizer::Gpt2) {  // its <|endoftext|>
    j["bos_token_id"] = kGpt2VocabSize - 1;
    j["eos_token_id"] = kGpt2VocabSize - 1;
  }
  j["torch_dtype"] = bf16 ? "bfloat16" : "float32";
  return j.dump(2) + "\n";
}

Tokenizer checkpoint_tokenizer(const CheckpointHeader& h) {
  toml::table deck;
  try {
    deck = toml::parse(h.deck);
  } catch (const toml::parse_error& e) {
    throw CheckpointError(fmt::format("{}: the deck stored in the checkpoint does not parse: {}", h.path,
                                      e.description()));
  }
  const std::string name = deck["data"]["tokenizer"].value_or(std::string());
  for (const Tokenizer t : {Tokenizer::Gpt2, Tokenizer::Bytes, Tokenizer::None})
    if (name == to_string(t)) return t;
  const std::string format = deck["data"]["format"].value_or(std::string("text"));
  return default_tokenizer(format == "text" ? DataFormat::Text : DataFormat::LlmC, h.model.vocab_size);
}

ExportResult export_checkpoint(const std::string& ckpt_path, const std::string& out_dir, bool bf16) {
  const std::string path = resolve_checkpoint(ckpt_path);
  const CheckpointHeader h = read_checkpoint_header(path);
  Handle file = ckpt::h5::open_file(path, MPI_COMM_NULL);
  // Tensor by tensor: each dataset is read and verified when the writer reaches it, so the export
  // holds one tensor at a time, never the whole model.
  std::vector<SafetensorsStream> tensors;
  const std::string prefix = std::string(ckpt::kModelGroup) + "/";
  for (const auto& d : h.datasets) {
    if (d.name.rfind(prefix, 0) != 0) continue;
    tensors.push_back({d.name.substr(prefix.size()), d.shape, [&file, &path, d] {
                         const std::string what = fmt::format("{}: dataset {}", path, d.name);
                         Handle ds = ckpt::h5::open_dataset(file, d.name, path);
                         std::vector<float> v = ckpt::read_whole(ds, d.shape, what);
                         const uint64_t sum =
                             ckpt::checksum_run(reinterpret_cast<const uint32_t*>(v.data()), int64_t(v.size()), 0);
                         if (sum != d.checksum)
                           throw CheckpointError(fmt::format("{}: checksum mismatch ({:016x}, stored {:016x}): the "
                                                             "checkpoint is damaged; not exporting it",
                                                             what, sum, d.checksum));
                         return v;
                       }});
  }
  const Tokenizer tokenizer = checkpoint_tokenizer(h);
  const std::string config = hf_config_json(h.model, tokenizer, bf16);  // before any file: it may refuse the model
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw CheckpointError(fmt::format("cannot create '{}': {}", out_dir, ec.message()));
  write_safetensors_streamed((fs::path(out_dir) / "model.safetensors").string(), tensors,
                    {{"format", "pt"}, {"producer", "trident"}, {"checkpoint", path},
                     {"step", std::to_string(h.progress.step)}},
                    bf16 ? SafetensorsDtype::BF16 : SafetensorsDtype::F32);
  ExportResult result{path, tokenizer, {"model.safetensors", "config.json"}};
  write_file_atomically("ckpt export", (fs::path(out_dir) / "config.json").string(), config);
  for (const auto& name : text::write_hf_tokenizer_files(out_dir, result.tokenizer, h.model.seq_len))
    result.files.push_back(name);
  return result;
}

std::string describe_checkpoint(const CheckpointHeader& h, bool with_deck) {
  const auto& p = h.progress;
  const auto& l = h.layout;
  const auto& m = h.model;
  std::string s;
  s += fmt::format("checkpoint      {}\n", h.path);
  s += fmt::format("format          trident-checkpoint version {} (written by trident {} at {})\n", h.format_version,
                   h.trident_version, h.created_utc);
  s += fmt::format("step            {} (optimizer step {}, next data step {}, {} samples consumed)\n", p.step,
                   p.optimizer_step, p.data_step, p.consumed_samples);
  s += fmt::format("last step       loss {}, lr {:.6g} ({} schedule)\n",
                   std::isfinite(p.loss) ? fmt::format("{:.6f}", p.loss) : std::string("n/a"), p.lr, h.lr_schedule);
  s += fmt::format("rng             model seed {}, data seed {}\n", p.model_seed, p.data_seed);
  s += fmt::format("model           GPT-2: vocab {}, positions {}, layers {}, hidden {}, heads {}, inner {}, {}\n",
                   m.vocab_size, m.seq_len, m.layers, m.hidden, m.heads, m.ffn_hidden,
                   m.tie_embeddings ? "tied embeddings" : "separate LM head");
  s += fmt::format("written with    tp {} x pp {} x dp {} ({} ranks), zero {}, virtual stages {}, sequence parallel {}, "
                   "order {}\n",
                   l.tp, l.pp, l.dp, l.world_size, l.zero, l.virtual_stages, l.sequence_parallel ? "on" : "off", l.order);
  s += fmt::format("optimizer       {}\n", h.has_optimizer ? (h.has_master ? "AdamW moments + fp32 master weights"
                                                                            : "AdamW moments")
                                                           : "none (parameters only)");
  int64_t bytes = 0;
  for (const auto& d : h.datasets) {
    int64_t n = 1;
    for (auto x : d.shape) n *= x;
    bytes += n * 4;
  }
  s += fmt::format("datasets        {} ({:.1f} MiB of float32)\n", h.datasets.size(), bytes / 1048576.0);
  for (const auto& d : h.datasets)
    s += fmt::format("  {:<60} {:<16} checksum {:016x}\n", d.name, ckpt::shape_str(d.shape), d.checksum);
  if (with_deck) s += "deck (resolved):\n" + h.deck + (h.deck.empty() || h.deck.back() == '\n' ? "" : "\n");
  return s;
}

}  // namespace trident
