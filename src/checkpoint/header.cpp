// Checkpoint header and metadata: written scalars, the serial header read, JSON, model checks.
#include "checkpoint/header.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>

#include "checkpoint/checksum.hpp"
#include "checkpoint/format.hpp"
#include "checkpoint/h5.hpp"
#include "checkpoint/manifest.hpp"
#include "trident_version.hpp"
#include "core/utc_time.hpp"

namespace fs = std::filesystem;

namespace trident {

using ckpt::shape_str;
namespace ckpt {

using h5::Handle;

namespace {


}  // namespace

nlohmann::json to_json(const CheckpointHeader& h) {
  nlohmann::json j;
  j["path"] = h.path;
  j["format_version"] = h.format_version;
  j["created_utc"] = h.created_utc;
  j["trident_version"] = h.trident_version;
  const auto& p = h.progress;
  j["progress"] = {p.step, p.optimizer_step, p.data_step, p.consumed_samples, p.model_seed, p.data_seed};
  j["lr"] = p.lr;
  j["loss"] = std::isfinite(p.loss) ? nlohmann::json(p.loss) : nlohmann::json(nullptr);
  const auto& l = h.layout;
  j["layout"] = {l.tp, l.pp, l.dp, l.zero, l.virtual_stages, l.sequence_parallel, l.world_size, l.order};
  const auto& m = h.model;
  j["model"] = {m.vocab_size, m.seq_len, m.layers, m.hidden, m.heads, m.ffn_hidden, m.tie_embeddings, m.init_std, m.seed};
  j["lr_schedule"] = h.lr_schedule;
  j["has_optimizer"] = h.has_optimizer;
  j["has_master"] = h.has_master;
  j["deck"] = h.deck;
  j["deck_checksum"] = h.deck_checksum;
  for (const auto& d : h.datasets) j["datasets"].push_back({d.name, d.shape, d.checksum});
  return j;
}

CheckpointHeader from_json(const nlohmann::json& j) {
  CheckpointHeader h;
  h.path = j["path"];
  h.format_version = j["format_version"];
  h.created_utc = j["created_utc"];
  h.trident_version = j["trident_version"];
  auto& p = h.progress;
  const auto& jp = j["progress"];
  p.step = jp[0];
  p.optimizer_step = jp[1];
  p.data_step = jp[2];
  p.consumed_samples = jp[3];
  p.model_seed = jp[4];
  p.data_seed = jp[5];
  p.lr = j["lr"];
  p.loss = j["loss"].is_null() ? std::numeric_limits<double>::quiet_NaN() : double(j["loss"]);
  auto& l = h.layout;
  const auto& jl = j["layout"];
  l.tp = jl[0];
  l.pp = jl[1];
  l.dp = jl[2];
  l.zero = jl[3];
  l.virtual_stages = jl[4];
  l.sequence_parallel = jl[5];
  l.world_size = jl[6];
  l.order = jl[7];
  auto& m = h.model;
  const auto& jm = j["model"];
  m.vocab_size = jm[0];
  m.seq_len = jm[1];
  m.layers = jm[2];
  m.hidden = jm[3];
  m.heads = jm[4];
  m.ffn_hidden = jm[5];
  m.tie_embeddings = jm[6];
  m.init_std = jm[7];
  m.seed = jm[8];
  h.lr_schedule = j["lr_schedule"];
  h.has_optimizer = j["has_optimizer"];
  h.has_master = j["has_master"];
  h.deck = j["deck"];
  h.deck_checksum = j["deck_checksum"];
  if (j.contains("datasets"))
    for (const auto& d : j["datasets"])
      h.datasets.push_back({d[0].get<std::string>(), d[1].get<std::vector<int64_t>>(), d[2].get<uint64_t>()});
  return h;
}

// ---------------------------------------------------------------------------------------------
// Checks of a header against the model a run needs.

int64_t resolved_ffn(const ModelConfig& m) { return m.ffn(); }

// The groups a load needs: params always, the optimizer groups when the shard has optimizer state.
void check_fits(const CheckpointHeader& h, const ModelConfig& m, bool need_optimizer) {
  const std::string& f = h.path;
  std::map<std::string, const CheckpointDataset*> have;
  for (const auto& d : h.datasets) have[d.name] = &d;
  std::vector<const char*> groups = {ckpt::kModelGroup};
  if (need_optimizer) {
    if (!h.has_optimizer)
      throw CheckpointError(fmt::format("{}: dataset {}/... is missing: the checkpoint holds no optimizer state", f,
                                        ckpt::kExpAvgGroup));
    groups.push_back(ckpt::kExpAvgGroup);
    groups.push_back(ckpt::kExpAvgSqGroup);
  }
  const auto specs = ckpt::model_tensors(m);
  for (const char* g : groups) {
    for (const auto& s : specs) {
      const std::string name = std::string(g) + "/" + s.name;
      auto it = have.find(name);
      if (it == have.end())
        throw CheckpointError(fmt::format("{}: dataset {} is missing (this model has it: {})", f, name,
                                          shape_str(s.shape)));
      if (it->second->shape != s.shape)
        throw CheckpointError(fmt::format("{}: dataset {} has shape {}, this model needs {}", f, name,
                                          shape_str(it->second->shape), shape_str(s.shape)));
    }
  }
  // Same shapes with other heads (or another LM head tying) would load silently wrong.
  std::map<std::string, bool> wanted;
  for (const auto& s : specs) wanted[std::string(ckpt::kModelGroup) + "/" + s.name] = true;
  for (const auto& d : h.datasets)
    if (d.name.rfind(std::string(ckpt::kModelGroup) + "/", 0) == 0 && !wanted.count(d.name))
      throw CheckpointError(fmt::format("{}: dataset {} is not part of this model (tie_embeddings = {})", f, d.name,
                                        m.tie_embeddings));
  if (h.model.heads != m.heads)
    throw CheckpointError(fmt::format("{}: the checkpoint's model has {} attention heads, this model {}", f,
                                      h.model.heads, m.heads));
  if (h.model.kv() != m.kv())
    throw CheckpointError(fmt::format("{}: the checkpoint's model has {} key/value heads, this model {}", f,
                                      h.model.kv(), m.kv()));
  // The same tensors computed another way: refused rather than trained on silently.
  const auto differs = [&](const char* what, const std::string& theirs, const std::string& ours) {
    if (theirs != ours)
      throw CheckpointError(fmt::format("{}: the checkpoint's model has {} {}, this model {}", f, what, theirs, ours));
  };
  differs("norm", to_string(h.model.norm), to_string(m.norm));
  differs("positions", to_string(h.model.positions), to_string(m.positions));
  differs("mlp", to_string(h.model.mlp), to_string(m.mlp));
}

void write_scalars(hid_t file, const Config& cfg, const TrainingProgress& p, int world_size, bool has_optimizer,
                   bool has_master, const std::string& path) {
  using namespace ckpt::h5;
  write_attr(file, "format", std::string(ckpt::kFormatName));
  write_attr(file, "format_version", kCheckpointFormatVersion);
  write_attr(file, "step", p.step);
  write_attr(file, "created_utc", utc_timestamp());
  write_attr(file, "trident_version", std::string(TRIDENT_VERSION));
  write_attr(file, "checksum_algorithm", std::string(ckpt::kChecksumAlgorithm));

  Handle train = create_group(file, "/train", path);
  write_attr(train, "step", p.step);
  write_attr(train, "loss", p.loss);
  write_attr(train, "lr", p.lr);
  write_attr(train, "consumed_samples", p.consumed_samples);
  write_attr(train, "tokens_per_step", cfg.tokens_per_step());

  Handle rng = create_group(file, "/rng", path);
  write_attr(rng, "algorithm", std::string("counter-based splitmix64: values are f(seed, counter)"));
  write_attr_u64(rng, "model_seed", p.model_seed);
  write_attr_u64(rng, "data_seed", p.data_seed);
  write_attr(rng, "counter", p.data_step);

  Handle lr = create_group(file, "/lr_schedule", path);
  write_attr(lr, "schedule", std::string(to_string(cfg.train.lr_schedule)));
  write_attr(lr, "step", p.step);
  write_attr(lr, "last_lr", p.lr);
  write_attr(lr, "lr", cfg.train.lr);
  write_attr(lr, "min_lr", cfg.train.min_lr);
  write_attr(lr, "warmup_steps", cfg.train.warmup_steps);
  write_attr(lr, "total_steps", cfg.train.steps);

  Handle data = create_group(file, "/data", path);
  write_attr(data, "next_step", p.data_step);
  write_attr(data, "consumed_samples", p.consumed_samples);
  write_attr(data, "format", std::string(to_string(cfg.data.format)));
  write_attr(data, "order", std::string(to_string(cfg.data.order)));
  write_attr_u64(data, "seed", p.data_seed);
  write_attr(data, "global_batch", cfg.train.global_batch);
  write_attr(data, "seq_len", cfg.model.seq_len);

  Handle layout = create_group(file, "/layout", path);
  write_attr(layout, "tp", int64_t(cfg.mesh.tp));
  write_attr(layout, "pp", int64_t(cfg.mesh.pp));
  write_attr(layout, "dp", int64_t(cfg.mesh.dp));
  write_attr(layout, "zero", int64_t(cfg.mesh.zero));
  write_attr(layout, "virtual_stages", int64_t(cfg.mesh.virtual_stages));
  write_attr(layout, "sequence_parallel", int64_t(cfg.mesh.sequence_parallel));
  write_attr(layout, "world_size", int64_t(world_size));
  write_attr(layout, "order", cfg.mesh.order);
  write_attr(layout, "schedule", std::string(to_string(cfg.mesh.schedule)));
  write_attr(layout, "vocab_pad_to", cfg.model.vocab_pad_to);

  Handle model = create_group(file, ckpt::kModelGroup, path);
  const auto& m = cfg.model;
  write_attr(model, "vocab_size", m.vocab_size);
  write_attr(model, "n_positions", m.seq_len);
  write_attr(model, "n_layer", m.layers);
  write_attr(model, "n_embd", m.hidden);
  write_attr(model, "n_head", m.heads);
  write_attr(model, "n_inner", resolved_ffn(m));
  write_attr(model, "tie_word_embeddings", int64_t(m.tie_embeddings));
  write_attr(model, "initializer_range", m.init_std);
  write_attr(model, "layer_norm_epsilon", m.norm_eps);
  write_attr(model, "activation_function", std::string(m.mlp == Mlp::SwiGlu ? "silu" : "gelu_new"));
  // The components (checkpoints before them lack these attributes and hold GPT-2).
  write_attr(model, "architecture", std::string(to_string(m.architecture)));
  write_attr(model, "num_key_value_heads", m.kv());
  write_attr(model, "norm", std::string(to_string(m.norm)));
  write_attr(model, "positions", std::string(to_string(m.positions)));
  write_attr(model, "rope_theta", m.rope_theta);
  write_attr(model, "mlp", std::string(to_string(m.mlp)));
  write_attr(model, "bias", int64_t(m.bias));
  write_attr_u64(model, "seed", m.seed);

  if (has_optimizer) {
    Handle optim = create_group(file, "/optim", path);
    write_attr(optim, "algorithm", std::string("adamw"));
    write_attr(optim, "step", p.optimizer_step);
    write_attr(optim, "beta1", cfg.train.beta1);
    write_attr(optim, "beta2", cfg.train.beta2);
    write_attr(optim, "eps", cfg.train.eps);
    write_attr(optim, "weight_decay", cfg.train.weight_decay);
    write_attr(optim, "has_master", int64_t(has_master));
  }
}

}  // namespace ckpt

namespace {

// One of a component attribute's names, or an error naming the attribute.
template <class E>
E read_choice(hid_t g, const char* attr, const std::string& where, std::initializer_list<E> values) {
  const std::string v = ckpt::h5::read_attr_str(g, attr, where);
  for (E e : values)
    if (v == to_string(e)) return e;
  throw CheckpointError(fmt::format("{}: attribute {} = \"{}\" is not one this trident knows", where, attr, v));
}

// The model's components; a checkpoint written before they existed holds GPT-2's.
void read_components(hid_t g, const std::string& w, ModelConfig& m) {
  using namespace ckpt::h5;
  m.kv_heads = m.heads;
  if (!has_attr(g, "architecture")) return;
  m.architecture = read_choice(g, "architecture", w, {Architecture::Gpt2, Architecture::Llama});
  m.kv_heads = read_attr_i64(g, "num_key_value_heads", w);
  m.norm = read_choice(g, "norm", w, {Norm::LayerNorm, Norm::RmsNorm});
  m.norm_eps = read_attr_f64(g, "layer_norm_epsilon", w);
  m.positions = read_choice(g, "positions", w, {Positions::Learned, Positions::Rope});
  m.rope_theta = read_attr_f64(g, "rope_theta", w);
  m.mlp = read_choice(g, "mlp", w, {Mlp::Gelu, Mlp::SwiGlu});
  m.bias = read_attr_i64(g, "bias", w) != 0;
  if (m.kv_heads < 1 || m.heads % m.kv_heads != 0)
    throw CheckpointError(fmt::format("{}: num_key_value_heads = {} does not divide the {} heads", w, m.kv_heads,
                                      m.heads));
}

}  // namespace

CheckpointHeader read_checkpoint_header(const std::string& path) {
  using namespace ckpt::h5;
  std::error_code ec;
  if (!fs::exists(path, ec)) throw CheckpointError(fmt::format("{}: no such checkpoint file", path));
  if (fs::is_directory(path, ec)) throw CheckpointError(fmt::format("{}: is a directory, not a checkpoint file", path));
  // Every byte outside the tensor data is checked before HDF5 parses any of it (manifest.hpp).
  const std::optional<ckpt::Manifest> manifest = ckpt::verify_manifest(path);
  Handle file = open_file(path, MPI_COMM_NULL);
  CheckpointHeader h;
  h.path = path;
  const std::string root = path + ": /";
  if (!has_attr(file, "format") || read_attr_str(file, "format", root) != ckpt::kFormatName)
    throw CheckpointError(fmt::format("{}: not a trident checkpoint (the root attribute format is not \"{}\")", path,
                                      ckpt::kFormatName));
  h.format_version = read_attr_i64(file, "format_version", root);
  if (h.format_version > kCheckpointFormatVersion)
    throw CheckpointError(fmt::format("{}: format version {} is newer than this trident reads (up to {}); "
                                      "read it with a newer trident",
                                      path, h.format_version, kCheckpointFormatVersion));
  if (h.format_version < 1) throw CheckpointError(fmt::format("{}: invalid format version {}", path, h.format_version));
  const int64_t step = read_attr_i64(file, "step", root);
  if (manifest && manifest->step != step)
    throw CheckpointError(fmt::format("{}: the manifest records step {}, the file step {}", path, manifest->step, step));
  h.created_utc = read_attr_str(file, "created_utc", root);
  h.trident_version = read_attr_str(file, "trident_version", root);

  auto group = [&](const char* name) { return open_group(file, name, path); };
  {
    Handle g = group("/train");
    const std::string w = path + ": /train";
    h.progress.step = read_attr_i64(g, "step", w);
    h.progress.loss = read_attr_f64(g, "loss", w);
    h.progress.lr = read_attr_f64(g, "lr", w);
    h.progress.consumed_samples = read_attr_i64(g, "consumed_samples", w);
    if (h.progress.step != step)
      throw CheckpointError(fmt::format("{}: /train step {} differs from the root step {}", path, h.progress.step, step));
  }
  {
    Handle g = group("/rng");
    h.progress.model_seed = read_attr_u64(g, "model_seed", path + ": /rng");
    h.progress.data_seed = read_attr_u64(g, "data_seed", path + ": /rng");
  }
  {
    Handle g = group("/lr_schedule");
    h.lr_schedule = read_attr_str(g, "schedule", path + ": /lr_schedule");
  }
  {
    Handle g = group("/data");
    h.progress.data_step = read_attr_i64(g, "next_step", path + ": /data");
  }
  {
    Handle g = group("/layout");
    const std::string w = path + ": /layout";
    auto& l = h.layout;
    l.tp = int(read_attr_i64(g, "tp", w));
    l.pp = int(read_attr_i64(g, "pp", w));
    l.dp = int(read_attr_i64(g, "dp", w));
    l.zero = int(read_attr_i64(g, "zero", w));
    l.virtual_stages = int(read_attr_i64(g, "virtual_stages", w));
    l.sequence_parallel = read_attr_i64(g, "sequence_parallel", w) != 0;
    l.world_size = int(read_attr_i64(g, "world_size", w));
    l.order = read_attr_str(g, "order", w);
  }
  {
    Handle g = group(ckpt::kModelGroup);
    const std::string w = path + ": /model";
    auto& m = h.model;
    m.vocab_size = read_attr_i64(g, "vocab_size", w);
    m.seq_len = read_attr_i64(g, "n_positions", w);
    m.layers = read_attr_i64(g, "n_layer", w);
    m.hidden = read_attr_i64(g, "n_embd", w);
    m.heads = read_attr_i64(g, "n_head", w);
    m.ffn_hidden = read_attr_i64(g, "n_inner", w);
    m.tie_embeddings = read_attr_i64(g, "tie_word_embeddings", w) != 0;
    m.init_std = read_attr_f64(g, "initializer_range", w);
    m.seed = read_attr_u64(g, "seed", w);
    read_components(g, w, m);
    if (m.vocab_size < 1 || m.seq_len < 1 || m.layers < 0 || m.hidden < 1 || m.heads < 1 || m.hidden % m.heads != 0 ||
        m.ffn_hidden < 1)
      throw CheckpointError(fmt::format("{}: /model attributes describe no valid GPT-2 (vocab {}, positions {}, "
                                        "layers {}, hidden {}, heads {}, inner {})",
                                        path, m.vocab_size, m.seq_len, m.layers, m.hidden, m.heads, m.ffn_hidden));
  }
  h.has_optimizer = exists(file, "/optim");
  if (h.has_optimizer) {
    Handle g = group("/optim");
    h.progress.optimizer_step = read_attr_i64(g, "step", path + ": /optim");
    h.has_master = read_attr_i64(g, "has_master", path + ": /optim") != 0;
  }
  {
    Handle d = open_dataset(file, ckpt::kDeckDataset, path);
    Handle type(H5Dget_type(d), H5Tclose);
    if (H5Tget_class(type) != H5T_STRING || H5Tis_variable_str(type) > 0)
      throw CheckpointError(fmt::format("{}: dataset {} is not a fixed-length string", path, ckpt::kDeckDataset));
    std::string buf(H5Tget_size(type), '\0');
    if (H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) < 0)
      fail(fmt::format("{}: cannot read dataset {}", path, ckpt::kDeckDataset));
    buf.resize(std::strlen(buf.c_str()));
    h.deck = buf;
    h.deck_checksum = read_attr_u64(d, "checksum", fmt::format("{}: dataset {}", path, ckpt::kDeckDataset));
  }

  // Every tensor group holds exactly the model's datasets with its shapes.
  const auto specs = ckpt::model_tensors(h.model);
  std::vector<const char*> groups = {ckpt::kModelGroup};
  if (h.has_optimizer) {
    groups.push_back(ckpt::kExpAvgGroup);
    groups.push_back(ckpt::kExpAvgSqGroup);
    if (h.has_master) groups.push_back(ckpt::kMasterGroup);
  }
  haddr_t file_size = 0;
  {
    hsize_t sz = 0;
    if (H5Fget_filesize(file, &sz) < 0) fail(path + ": cannot read the file size");
    file_size = sz;
  }
  for (const char* gname : groups) {
    Handle g = open_group(file, gname, path);
    std::map<std::string, bool> expected;
    for (const auto& s : specs) expected[s.name] = true;
    for (const auto& member : member_names(g, path, gname))
      if (!expected.count(member))
        throw CheckpointError(fmt::format("{}: dataset {}/{} is not part of the model the checkpoint describes", path,
                                          gname, member));
    for (const auto& s : specs) {
      const std::string name = std::string(gname) + "/" + s.name;
      const std::string what = fmt::format("{}: dataset {}", path, name);
      Handle d = open_dataset(file, name, path);
      Handle type(H5Dget_type(d), H5Tclose);
      if (H5Tget_class(type) != H5T_FLOAT || H5Tget_size(type) != 4)
        throw CheckpointError(what + ": not float32");
      const auto shape = ckpt::h5::dataset_shape(d, what);
      if (shape != s.shape)
        throw CheckpointError(fmt::format("{} has shape {}, the model recorded in /model needs {}", what,
                                          shape_str(shape), shape_str(s.shape)));
      const haddr_t offset = H5Dget_offset(d);
      const hsize_t storage = H5Dget_storage_size(d);
      if (offset == HADDR_UNDEF || storage < hsize_t(s.numel()) * 4 || offset + storage > file_size)
        throw CheckpointError(fmt::format("{}: its data lies beyond the end of the file (truncated?)", what));
      h.datasets.push_back({name, shape, read_attr_u64(d, "checksum", what)});
    }
  }
  return h;
}

}  // namespace trident
