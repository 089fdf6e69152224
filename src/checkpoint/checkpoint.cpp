// Writing, reading, validating and resuming checkpoints (see checkpoint.hpp, docs/checkpoints.md).
#include "checkpoint/checkpoint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <fmt/ranges.h>

#include "checkpoint/checksum.hpp"
#include "checkpoint/format.hpp"
#include "checkpoint/h5.hpp"
#include "checkpoint/shard_map.hpp"
#include "core/log.hpp"
#include "optim/lr_schedule.hpp"
#include "trident_version.hpp"

namespace fs = std::filesystem;

namespace trident {

using ckpt::Block;
using ckpt::TensorSpec;
using ckpt::h5::Handle;

// ---------------------------------------------------------------------------------------------
// Shared format pieces.

namespace ckpt {

std::vector<TensorSpec> model_tensors(const ModelConfig& m) {
  const GptShapes s = GptShapes::from(m, 1);
  const ParameterLayout whole(s, 0, 1);
  std::vector<TensorSpec> out;
  for (const auto& t : whole.tensors()) out.push_back({t.name, dataset_shape(t, s)});
  return out;
}

std::string shape_str(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

uint64_t checksum_rows(hid_t dset, const std::vector<int64_t>& shape, int64_t row0, int64_t rows, hid_t dxpl,
                       const std::string& what) {
  const int64_t cols = shape.size() > 1 ? shape[1] : 1;
  Handle fspace(H5Dget_space(dset), H5Sclose);
  // Read in slabs of at most ~16 Mi elements to bound memory.
  const int64_t slab_rows = std::max<int64_t>(1, (int64_t(1) << 24) / std::max<int64_t>(cols, 1));
  std::vector<float> buf;
  uint64_t sum = 0;
  int64_t r = row0;
  const int64_t stop = row0 + rows;
  // The number of H5Dread calls depends on `rows`: use an independent transfer (dxpl) when ranks
  // read different row counts.
  do {
    const int64_t n = std::min(slab_rows, stop - r);
    const hsize_t start[2] = {hsize_t(r), 0}, count[2] = {hsize_t(std::max<int64_t>(n, 0)), hsize_t(cols)};
    if (n > 0) {
      if (H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, nullptr, count, nullptr) < 0) h5::fail(what);
    } else {
      H5Sselect_none(fspace);
    }
    const hsize_t mcount = hsize_t(std::max<int64_t>(n * cols, 1));
    Handle mspace(H5Screate_simple(1, &mcount, nullptr), H5Sclose);
    if (n <= 0) H5Sselect_none(mspace);
    buf.resize(size_t(mcount));
    if (H5Dread(dset, H5T_NATIVE_FLOAT, mspace, fspace, dxpl, buf.data()) < 0) h5::fail(what + ": cannot read");
    if (n > 0)
      sum += checksum_run(reinterpret_cast<const uint32_t*>(buf.data()), n * cols, uint64_t(r) * uint64_t(cols));
    r += std::max<int64_t>(n, 0);
  } while (r < stop);
  return sum;
}

std::vector<float> read_whole(hid_t dset, const std::vector<int64_t>& shape, const std::string& what) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  std::vector<float> out(size_t(std::max<int64_t>(n, 1)));
  if (H5Dread(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0) h5::fail(what + ": cannot read");
  out.resize(size_t(n));
  return out;
}

}  // namespace ckpt

namespace {

using ckpt::shape_str;

// ---------------------------------------------------------------------------------------------
// Small utilities.

int comm_rank(MPI_Comm c) {
  int r = 0;
  MPI_Comm_rank(c, &r);
  return r;
}
int comm_size(MPI_Comm c) {
  int s = 1;
  MPI_Comm_size(c, &s);
  return s;
}

// Every rank learns whether any rank failed; all throw CheckpointError with the message of the
// lowest failing rank. Keeps collective code from leaving ranks behind in a collective.
void agree(MPI_Comm comm, const std::string& local_error) {
  int mine = local_error.empty() ? INT_MAX : comm_rank(comm), first = INT_MAX;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
  if (first == INT_MAX) return;
  int64_t len = comm_rank(comm) == first ? int64_t(local_error.size()) : 0;
  MPI_Bcast(&len, 1, MPI_INT64_T, first, comm);
  std::string msg(size_t(len), '\0');
  if (comm_rank(comm) == first) msg = local_error;
  MPI_Bcast(msg.data(), int(len), MPI_CHAR, first, comm);
  throw CheckpointError(msg);
}

// Runs f on rank 0 only; its CheckpointError/Error (or none) is agreed by every rank.
template <class F>
void on_root(MPI_Comm comm, F f) {
  std::string err;
  if (comm_rank(comm) == 0) {
    try {
      f();
    } catch (const std::exception& e) {
      err = e.what();
      if (err.empty()) err = "unknown error";
    }
  }
  agree(comm, err);
}

void bcast_string(std::string& s, MPI_Comm comm) {
  int64_t n = int64_t(s.size());
  MPI_Bcast(&n, 1, MPI_INT64_T, 0, comm);
  s.resize(size_t(n));
  MPI_Bcast(s.data(), int(n), MPI_CHAR, 0, comm);
}

std::string sys_error(const std::string& what, const std::string& path) {
  return fmt::format("{} '{}': {}", what, path, std::strerror(errno));
}

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) throw CheckpointError(sys_error("cannot open for fsync", path));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw CheckpointError(fmt::format("cannot fsync '{}': {}", path, std::strerror(err)));
}

void rename_path(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    throw CheckpointError(fmt::format("cannot rename '{}' to '{}': {}", from, to, std::strerror(errno)));
}

std::string dir_of(const std::string& file) {
  const fs::path p = fs::path(file).parent_path();
  return p.empty() ? std::string(".") : p.string();
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

CrashPoint crash_point_from_env() {
  const char* v = std::getenv("TRIDENT_CHECKPOINT_CRASH");
  if (!v) return CrashPoint::None;
  const std::string s = v;
  if (s == "before_rename") return CrashPoint::BeforeRename;
  if (s == "before_latest") return CrashPoint::BeforeLatest;
  return CrashPoint::None;
}

// The crash hooks: a real crash (environment) ends the process; the test hook throws on every rank.
void crash_hook(CrashPoint here, const WriteOptions& options, const char* name) {
  if (crash_point_from_env() == here) {
    std::fprintf(stderr, "TRIDENT_CHECKPOINT_CRASH=%s: exiting as a crash would\n", name);
    std::fflush(stderr);
    std::_Exit(86);
  }
  if (options.crash_at == here) throw InjectedCrash(fmt::format("injected crash {}", name));
}

// One tensor group of the file and the buffers behind it.
struct Kind {
  const char* group;
  float* RankShard::*buffer;
  bool optimizer;  // indexed by the optimizer range, owned by optim_owner
};
const Kind kParams{ckpt::kModelGroup, &RankShard::params, false};
const Kind kExpAvg{ckpt::kExpAvgGroup, &RankShard::exp_avg, true};
const Kind kExpAvgSq{ckpt::kExpAvgSqGroup, &RankShard::exp_avg_sq, true};
const Kind kMaster{ckpt::kMasterGroup, &RankShard::master, true};

// This rank's part of dataset `name` of `kind`: blocks, the buffer of the shard holding the tensor
// and the offset of the tensor's element 0 in it.
struct Part {
  std::vector<Block> blocks;
  float* buffer = nullptr;
  int64_t offset = 0;  // buffer index of the tensor's element 0 (may be negative with ZeRO ranges)
  bool owner = false;
};

// A tensor this rank holds and the shard (pipeline chunk) holding it.
struct Held {
  const RankShard* shard = nullptr;
  const ParamTensor* tensor = nullptr;
};

Part part_of(const Held& held, const Kind& kind) {
  Part p;
  if (!held.tensor) return p;
  const RankShard& shard = *held.shard;
  const ParamTensor* t = held.tensor;
  p.buffer = shard.*(kind.buffer);
  const ParameterLayout& L = *shard.layout;
  int64_t begin = 0, end = t->numel;
  if (kind.optimizer) {
    const int64_t ob = shard.optim_begin, oe = shard.optim_stop();
    begin = std::max(t->offset, ob) - t->offset;
    end = std::min(t->offset + t->numel, oe) - t->offset;
    if (end <= begin) return p;
    p.offset = t->offset - ob;
  } else {
    p.offset = t->offset;
  }
  p.blocks = ckpt::tensor_blocks(*t, L.shapes(), L.tp_rank(), L.tp_size(), begin, end);
  const bool listed = std::find(shard.not_owned.begin(), shard.not_owned.end(), t->name) != shard.not_owned.end();
  // Tensors replicated over the TP group (LayerNorms, wpe, row-parallel biases): TP rank 0 owns them.
  const bool tp_replica = t->split == TpSplit::None && L.tp_rank() != 0;
  p.owner = !listed && !tp_replica && (kind.optimizer ? shard.optim_owner : shard.params_owner);
  return p;
}

// The tensors of all of this rank's shards by name. The chunks of one rank hold disjoint sets of
// tensors (the two holders of a tied embedding are on different pipeline stages): a tensor in two
// shards is an error, reported in `error`.
std::map<std::string, Held> tensors_by_name(const std::vector<RankShard>& shards, std::string& error) {
  std::map<std::string, Held> m;
  for (const auto& shard : shards)
    for (const auto& t : shard.layout->tensors()) {
      auto [it, fresh] = m.emplace(t.name, Held{&shard, &t});
      if (!fresh && error.empty())
        error = fmt::format("checkpoint: tensor {} is held by two shards of this rank (pipeline chunks of one rank hold "
                            "disjoint layers)",
                            t.name);
    }
  return m;
}

// Every shard has a layout and parameters, and an optimizer range inside its layout (agreed).
void check_shards(const std::vector<RankShard>& shards, const char* function, MPI_Comm comm) {
  std::string err;
  if (shards.empty()) err = fmt::format("{}: no shard on this rank", function);
  for (const auto& shard : shards) {
    if (!err.empty()) break;
    if (!shard.layout || !shard.params)
      err = fmt::format("{}: a shard has no layout or no parameters", function);
    else if (shard.optim_begin < 0 || shard.optim_stop() > shard.layout->total() || shard.optim_begin > shard.optim_stop())
      err = fmt::format("{}: optimizer range [{}, {}) outside the layout's {} elements", function, shard.optim_begin,
                        shard.optim_stop(), shard.layout->total());
  }
  agree(comm, err);
}

// Selects `blocks` in a dataset's file space (none when empty).
void select_blocks(hid_t space, size_t ndims, const std::vector<Block>& blocks, const std::string& what) {
  if (blocks.empty()) {
    H5Sselect_none(space);
    return;
  }
  bool first = true;
  for (const auto& b : blocks) {
    const hsize_t start[2] = {hsize_t(b.row0), hsize_t(b.col0)};
    const hsize_t count[2] = {hsize_t(b.rows), hsize_t(b.cols)};
    if (ndims == 1 && b.col0 != 0) TRIDENT_FAIL("{}: a 1-D block with a column offset", what);
    if (H5Sselect_hyperslab(space, first ? H5S_SELECT_SET : H5S_SELECT_OR, start, nullptr, count, nullptr) < 0)
      ckpt::h5::fail(what + ": cannot select this rank's blocks");
    first = false;
  }
}

Handle memory_space(int64_t n) {
  const hsize_t count = hsize_t(std::max<int64_t>(n, 1));
  Handle m(H5Screate_simple(1, &count, nullptr), H5Sclose);
  if (n == 0) H5Sselect_none(m);
  return m;
}

// Data transfers: collective (MPI-IO two-phase aggregation: few large requests per file-system
// stripe, the right choice at scale and for the strided Conv1D blocks), except when the run says
// its ranks outnumber the cores (runtime.mpi_wait = "poll"): then MPI-IO's internal blocking
// collectives spin against each other, and independent transfers are several times faster.
// TRIDENT_CHECKPOINT_IO=collective|independent overrides both ways.
bool collective_data(const Config& cfg) {
  const char* v = std::getenv("TRIDENT_CHECKPOINT_IO");
  if (v && std::string(v) == "independent") return false;
  if (v && std::string(v) == "collective") return true;
  return cfg.runtime.mpi_wait != MpiWait::Poll;
}

Handle transfer(bool collective) {
  Handle dxpl(H5Pcreate(H5P_DATASET_XFER), H5Pclose);
  if (H5Pset_dxpl_mpio(dxpl, collective ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT) < 0)
    ckpt::h5::fail("H5Pset_dxpl_mpio");
  return dxpl;
}

// Seconds spent in the phases of a write or load on this rank (reported by rank 0).
struct Phases {
  double pack = 0, io = 0, commit = 0;
};
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

uint32_t bits_of(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

// ---------------------------------------------------------------------------------------------
// Header <-> JSON, to broadcast what rank 0 read.

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

int64_t resolved_ffn(const ModelConfig& m) { return m.ffn_hidden > 0 ? m.ffn_hidden : 4 * m.hidden; }

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
}

// ---------------------------------------------------------------------------------------------
// Writing.

void write_string_dataset(hid_t file, const std::string& name, const std::string& text, MPI_Comm comm,
                          const std::string& path) {
  Handle type = ckpt::h5::string_type(text.size());
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle d(H5Dcreate2(file, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  if (!d.valid()) ckpt::h5::fail(fmt::format("{}: cannot create dataset {}", path, name));
  // Rank 0 writes it, the others take part in the collective write with nothing selected.
  Handle fspace(H5Dget_space(d), H5Sclose);
  Handle mspace(H5Screate(H5S_SCALAR), H5Sclose);
  if (comm_rank(comm) != 0) {
    H5Sselect_none(fspace);
    H5Sselect_none(mspace);
  }
  Handle dxpl = transfer(true);
  std::string buf = text;
  if (buf.empty()) buf.push_back('\0');
  if (H5Dwrite(d, type, mspace, fspace, dxpl, buf.data()) < 0)
    ckpt::h5::fail(fmt::format("{}: cannot write dataset {}", path, name));
  uint64_t sum = 0;
  for (size_t i = 0; i < text.size(); ++i) sum += ckpt::element_hash(i, uint8_t(text[i]));
  ckpt::h5::write_attr_u64(d, "checksum", sum);
}

void write_scalars(hid_t file, const Config& cfg, const TrainingProgress& p, int world_size, bool has_optimizer,
                   bool has_master, const std::string& path) {
  using namespace ckpt::h5;
  write_attr(file, "format", std::string(ckpt::kFormatName));
  write_attr(file, "format_version", kCheckpointFormatVersion);
  write_attr(file, "step", p.step);
  write_attr(file, "created_utc", utc_now());
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
  write_attr(model, "layer_norm_epsilon", 1e-5);
  write_attr(model, "activation_function", std::string("gelu_new"));
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

// Writes the datasets of one group: returns per-dataset (partial checksum, elements written) of this rank.
void write_group(hid_t file, const Kind& kind, const std::vector<TensorSpec>& specs,
                 const std::map<std::string, Held>& mine, const std::string& path, bool collective,
                 std::vector<Handle>& datasets, std::vector<uint64_t>& sums, std::vector<int64_t>& counts,
                 Phases& phases) {
  Handle group = ckpt::h5::exists(file, kind.group) ? ckpt::h5::open_group(file, kind.group, path)
                                                    : ckpt::h5::create_group(file, kind.group, path);
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
  H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
  Handle dxpl = transfer(collective);
  std::vector<float> packed;
  for (const auto& s : specs) {
    const std::string what = fmt::format("{}: dataset {}/{}", path, kind.group, s.name);
    std::vector<hsize_t> dims(s.shape.begin(), s.shape.end());
    Handle fspace(H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose);
    Handle d(H5Dcreate2(group, s.name.c_str(), H5T_IEEE_F32LE, fspace, H5P_DEFAULT, dcpl, H5P_DEFAULT), H5Dclose);
    if (!d.valid()) ckpt::h5::fail(what + ": cannot create");

    auto it = mine.find(s.name);
    Part part = part_of(it == mine.end() ? Held{} : it->second, kind);
    if (!part.owner) part.blocks.clear();  // replicas and lower-stage duplicates write nothing
    const int64_t cols = s.shape.size() > 1 ? s.shape[1] : 1;
    const int64_t n = ckpt::total_count(part.blocks);
    packed.resize(size_t(std::max<int64_t>(n, 1)));
    uint64_t sum = 0;
    auto t = std::chrono::steady_clock::now();
    ckpt::for_each_element(part.blocks, cols, [&](int64_t di, int64_t si, int64_t pi) {
      const float v = part.buffer[part.offset + si];
      packed[size_t(pi)] = v;
      sum += ckpt::element_hash(uint64_t(di), bits_of(v));
    });
    phases.pack += seconds_since(t);
    t = std::chrono::steady_clock::now();
    select_blocks(fspace, dims.size(), part.blocks, what);
    Handle mspace = memory_space(n);
    if (H5Dwrite(d, H5T_NATIVE_FLOAT, mspace, fspace, dxpl, packed.data()) < 0) ckpt::h5::fail(what + ": cannot write");
    phases.io += seconds_since(t);
    sums.push_back(sum);
    counts.push_back(n);
    datasets.push_back(std::move(d));
  }
}

std::vector<Kind> kinds_present(bool has_optimizer, bool has_master) {
  std::vector<Kind> k = {kParams};
  if (has_optimizer) {
    k.push_back(kExpAvg);
    k.push_back(kExpAvgSq);
  }
  if (has_master) k.push_back(kMaster);
  return k;
}

// Whether any shard of any rank has the buffers `has` looks for (optimizer state, master weights):
// then every shard whose optimizer range is not empty must have them too (a shard with an empty ZeRO
// partition may pass nulls).
template <class Has>
bool any_rank_has(MPI_Comm comm, const std::vector<RankShard>& shards, Has has, const char* what) {
  int mine = 0, any = 0;
  for (const auto& shard : shards) mine |= int(has(shard));
  MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, comm);
  std::string err;
  for (const auto& shard : shards)
    if (any && !has(shard) && shard.optim_stop() > shard.optim_begin)
      err = fmt::format("checkpoint: {} are set on some shards and not on others", what);
  agree(comm, err);
  return any != 0;
}
bool has_moments(const RankShard& s) { return s.exp_avg && s.exp_avg_sq; }
bool has_master_weights(const RankShard& s) { return s.master != nullptr; }

void prune(const std::string& dir, int64_t keep, const std::string& just_written) {
  // Leftovers of interrupted writes first: nothing else writes into the directory.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, std::regex(R"(step_\d+\.h5\.tmp)"))) {
      log::info("checkpoint: removing {} (left by an interrupted write)", e.path().string());
      fs::remove(e.path(), ec);
    }
  }
  if (keep <= 0) return;
  const auto all = list_checkpoints(dir);
  for (size_t i = size_t(keep); i < all.size(); ++i) {
    if (fs::equivalent(all[i], just_written, ec)) continue;
    log::info("checkpoint: deleting {} (keep = {})", all[i], keep);
    if (!fs::remove(all[i], ec) && ec) log::warn("checkpoint: cannot delete {}: {}", all[i], ec.message());
  }
}

void write_text_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) throw CheckpointError(sys_error("cannot create", tmp));
    const ssize_t w = ::write(fd, text.data(), text.size());
    const int err = errno;
    const int rc = w == ssize_t(text.size()) ? ::fsync(fd) : -1;
    ::close(fd);
    if (rc != 0) throw CheckpointError(fmt::format("cannot write '{}': {}", tmp, std::strerror(err ? err : errno)));
  }
  rename_path(tmp, path);
  fsync_path(dir_of(path), true);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public functions.

TrainingProgress progress_after_step(const Config& cfg, int64_t step, double loss) {
  TrainingProgress p;
  p.step = step;
  p.optimizer_step = step;
  p.data_step = step;
  p.consumed_samples = step * cfg.train.global_batch;
  p.model_seed = cfg.model.seed;
  p.data_seed = cfg.data.seed;
  p.lr = step > 0 ? learning_rate(cfg.train, step) : 0.0;
  p.loss = loss;
  return p;
}

std::string checkpoint_file_name(int64_t step) { return fmt::format("step_{:08d}.h5", step); }

std::string write_checkpoint(const std::string& dir, const Config& cfg, const std::vector<RankShard>& shards,
                             const TrainingProgress& progress, MPI_Comm comm, const WriteOptions& options) {
  TRIDENT_CHECK(!dir.empty(), "write_checkpoint: empty directory");
  check_shards(shards, "write_checkpoint", comm);
  const bool has_optimizer =
      any_rank_has(comm, shards, has_moments, "the optimizer state buffers (exp_avg, exp_avg_sq)");
  const bool has_master = any_rank_has(comm, shards, has_master_weights, "the master weight buffers");
  TRIDENT_CHECK(has_optimizer || !has_master, "write_checkpoint: master weights without optimizer state");

  const auto t0 = std::chrono::steady_clock::now();
  const std::string final_path = (fs::path(dir) / checkpoint_file_name(progress.step)).string();
  const std::string tmp_path = final_path + ".tmp";
  on_root(comm, [&] {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw CheckpointError(fmt::format("cannot create checkpoint directory '{}': {}", dir, ec.message()));
  });

  const auto specs = ckpt::model_tensors(cfg.model);
  std::string held_error;
  const auto mine = tensors_by_name(shards, held_error);
  {
    std::string err = held_error;
    for (const auto& [name, held] : mine) {
      bool known = false;
      for (const auto& s : specs) known |= s.name == name;
      if (!known) err = fmt::format("write_checkpoint: this rank holds tensor {}, which the model of the deck has not", name);
    }
    agree(comm, err);
  }

  int64_t bytes = 0;
  Phases phases;
  auto commit_start = std::chrono::steady_clock::now();
  {
    Handle file = ckpt::h5::create_file(tmp_path, comm, options.alignment_bytes);
    write_scalars(file, cfg, progress, comm_size(comm), has_optimizer, has_master, tmp_path);
    write_string_dataset(file, ckpt::kDeckDataset, cfg.resolved_toml, comm, tmp_path);
    std::vector<Handle> datasets;
    std::vector<uint64_t> sums;
    std::vector<int64_t> counts;
    std::vector<std::string> names;
    std::vector<int64_t> sizes;
    for (const Kind& kind : kinds_present(has_optimizer, has_master)) {
      write_group(file, kind, specs, mine, tmp_path, collective_data(cfg), datasets, sums, counts, phases);
      for (const auto& s : specs) {
        names.push_back(std::string(kind.group) + "/" + s.name);
        sizes.push_back(s.numel());
      }
    }
    // Checksums and coverage: every element written by exactly one rank.
    std::vector<uint64_t> total_sums(sums.size());
    std::vector<int64_t> total_counts(counts.size());
    MPI_Allreduce(sums.data(), total_sums.data(), int(sums.size()), MPI_UINT64_T, MPI_SUM, comm);
    MPI_Allreduce(counts.data(), total_counts.data(), int(counts.size()), MPI_INT64_T, MPI_SUM, comm);
    std::string coverage;
    for (size_t i = 0; i < names.size() && coverage.empty(); ++i)
      if (total_counts[i] != sizes[i])
        coverage = fmt::format(
            "{}: dataset {}: the ranks wrote {} elements of {}; every element must be written by exactly one rank "
            "(see the ownership rules of RankShard)",
            tmp_path, names[i], total_counts[i], sizes[i]);
    if (coverage.empty())
      for (size_t i = 0; i < datasets.size(); ++i) {
        ckpt::h5::write_attr_u64(datasets[i], "checksum", total_sums[i]);
        bytes += sizes[i] * 4;
      }
    for (auto& d : datasets) d.close(tmp_path + ": closing a dataset");
    commit_start = std::chrono::steady_clock::now();
    if (coverage.empty() && H5Fflush(file, H5F_SCOPE_GLOBAL) < 0) ckpt::h5::fail(tmp_path + ": H5Fflush");
    file.close(tmp_path + ": closing the file");
    if (!coverage.empty()) {
      if (comm_rank(comm) == 0) std::remove(tmp_path.c_str());
      throw CheckpointError(coverage);
    }
  }

  // Commit: the data is on disk before the rename makes the file visible under its final name,
  // and the rename is on disk before `latest` names it.
  on_root(comm, [&] { fsync_path(tmp_path, false); });
  crash_hook(CrashPoint::BeforeRename, options, "before_rename");
  on_root(comm, [&] {
    rename_path(tmp_path, final_path);
    fsync_path(dir, true);
  });
  crash_hook(CrashPoint::BeforeLatest, options, "before_latest");
  on_root(comm, [&] {
    write_text_atomically((fs::path(dir) / ckpt::kLatestName).string(), checkpoint_file_name(progress.step) + "\n");
    prune(dir, cfg.checkpoint.keep, final_path);
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  phases.commit = seconds_since(commit_start);
  log::info("checkpoint: wrote {} (step {}, {:.1f} MiB in {:.2f} s, {:.0f} MiB/s; rank 0: pack+checksum {:.2f} s, "
            "HDF5 writes {:.2f} s, flush+fsync+rename+latest {:.2f} s)",
            final_path, progress.step, bytes / 1048576.0, s, bytes / 1048576.0 / std::max(s, 1e-9), phases.pack,
            phases.io, phases.commit);
  return final_path;
}

// ---------------------------------------------------------------------------------------------
// Reading the header (serial).

CheckpointHeader read_checkpoint_header(const std::string& path) {
  using namespace ckpt::h5;
  std::error_code ec;
  if (!fs::exists(path, ec)) throw CheckpointError(fmt::format("{}: no such checkpoint file", path));
  if (fs::is_directory(path, ec)) throw CheckpointError(fmt::format("{}: is a directory, not a checkpoint file", path));
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

// ---------------------------------------------------------------------------------------------
// Loading (collective).

CheckpointHeader load_checkpoint(const std::string& path, const Config& cfg, const std::vector<RankShard>& shards,
                                 MPI_Comm comm) {
  const auto t0 = std::chrono::steady_clock::now();
  check_shards(shards, "load_checkpoint", comm);
  std::string held_error;
  const auto mine = tensors_by_name(shards, held_error);
  agree(comm, held_error);
  const bool want_optimizer =
      any_rank_has(comm, shards, has_moments, "the optimizer state buffers (exp_avg, exp_avg_sq)");
  const bool want_master = any_rank_has(comm, shards, has_master_weights, "the master weight buffers");

  // 1. Rank 0 reads and checks the structure; everyone gets the header.
  std::string text;
  on_root(comm, [&] {
    CheckpointHeader h = read_checkpoint_header(path);
    check_fits(h, cfg.model, want_optimizer);
    text = to_json(h).dump();
  });
  bcast_string(text, comm);
  const CheckpointHeader header = from_json(nlohmann::json::parse(text));

  // 2. Every rank reads its own blocks of every dataset, collectively.
  const auto specs = ckpt::model_tensors(cfg.model);
  std::map<std::string, uint64_t> stored;
  for (const auto& d : header.datasets) stored[d.name] = d.checksum;
  struct Read {
    std::string name;        // dataset
    std::vector<int64_t> shape;
    uint64_t sum = 0;
    int64_t count = 0;
  };
  std::vector<Read> reads;
  Phases phases;
  {
    Handle file = ckpt::h5::open_file(path, comm);
    Handle dxpl = transfer(collective_data(cfg));
    std::vector<Kind> kinds = {kParams};
    if (want_optimizer) {
      kinds.push_back(kExpAvg);
      kinds.push_back(kExpAvgSq);
    }
    if (want_master) kinds.push_back(kMaster);
    // Zero first: padding rows are never stored.
    for (const auto& shard : shards)
      for (const Kind& kind : kinds)
        if (float* buffer = shard.*(kind.buffer))
          std::fill(buffer, buffer + (kind.optimizer ? shard.optim_stop() - shard.optim_begin : shard.layout->total()),
                    0.f);
    std::vector<float> packed;
    for (const Kind& kind : kinds) {
      // Master weights from the parameters when the checkpoint kept none (an fp32 run).
      const std::string group = (kind.group == kMaster.group && !header.has_master) ? ckpt::kModelGroup : kind.group;
      for (const auto& s : specs) {
        const std::string name = group + "/" + s.name;
        const std::string what = fmt::format("{}: dataset {}", path, name);
        Handle d(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose);
        if (!d.valid()) ckpt::h5::fail(what + ": cannot open");
        Handle fspace(H5Dget_space(d), H5Sclose);
        auto it = mine.find(s.name);
        const Part part = part_of(it == mine.end() ? Held{} : it->second, kind);
        const int64_t n = ckpt::total_count(part.blocks);
        select_blocks(fspace, s.shape.size(), part.blocks, what);
        Handle mspace = memory_space(n);
        packed.resize(size_t(std::max<int64_t>(n, 1)));
        auto t = std::chrono::steady_clock::now();
        if (H5Dread(d, H5T_NATIVE_FLOAT, mspace, fspace, dxpl, packed.data()) < 0) ckpt::h5::fail(what + ": cannot read");
        phases.io += seconds_since(t);
        t = std::chrono::steady_clock::now();
        const int64_t cols = s.shape.size() > 1 ? s.shape[1] : 1;
        uint64_t sum = 0;
        ckpt::for_each_element(part.blocks, cols, [&](int64_t di, int64_t si, int64_t pi) {
          const float v = packed[size_t(pi)];
          part.buffer[part.offset + si] = v;
          sum += ckpt::element_hash(uint64_t(di), bits_of(v));
        });
        phases.pack += seconds_since(t);
        int64_t k = n;
        if (!part.owner) {
          sum = 0;
          k = 0;
        }
        if (kind.group == kMaster.group && !header.has_master) continue;  // verified as /model
        reads.push_back({name, s.shape, sum, k});
      }
    }

    // 3. Checksums: the owners' partial sums cover each dataset once; datasets that the flags do
    //    not cover exactly once are verified by a separate distributed read.
    std::vector<uint64_t> sums(reads.size()), total_sums(reads.size());
    std::vector<int64_t> counts(reads.size()), total_counts(reads.size());
    for (size_t i = 0; i < reads.size(); ++i) {
      sums[i] = reads[i].sum;
      counts[i] = reads[i].count;
    }
    MPI_Allreduce(sums.data(), total_sums.data(), int(sums.size()), MPI_UINT64_T, MPI_SUM, comm);
    MPI_Allreduce(counts.data(), total_counts.data(), int(counts.size()), MPI_INT64_T, MPI_SUM, comm);
    const int rank = comm_rank(comm), size = comm_size(comm);
    Handle independent = transfer(false);
    std::vector<std::string> bad;
    int separately = 0;
    for (size_t i = 0; i < reads.size(); ++i) {
      int64_t numel = 1;
      for (auto dim : reads[i].shape) numel *= dim;
      uint64_t actual = total_sums[i];
      if (total_counts[i] != numel) {
        ++separately;
        const std::string what = fmt::format("{}: dataset {}", path, reads[i].name);
        Handle d(H5Dopen2(file, reads[i].name.c_str(), H5P_DEFAULT), H5Dclose);
        if (!d.valid()) ckpt::h5::fail(what + ": cannot open");
        const int64_t rows = reads[i].shape[0];
        const int64_t r0 = rows * rank / size, r1 = rows * (rank + 1) / size;
        uint64_t part = ckpt::checksum_rows(d, reads[i].shape, r0, r1 - r0, independent, what);
        MPI_Allreduce(&part, &actual, 1, MPI_UINT64_T, MPI_SUM, comm);
      }
      const uint64_t expected = stored.at(reads[i].name);
      if (actual != expected)
        bad.push_back(fmt::format("{} (checksum {:016x}, stored {:016x})", reads[i].name, actual, expected));
    }
    file.close(path + ": closing the file");
    if (!bad.empty())
      throw CheckpointError(fmt::format("{}: checksum mismatch in dataset {}: the checkpoint is damaged", path,
                                        fmt::join(bad, ", dataset ")));
    if (separately > 0)
      log::info("checkpoint: {} dataset(s) verified by a separate read (the shards' ownership flags do not cover "
                "them exactly once)",
                separately);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log::info("checkpoint: loaded {} (step {}; written with tp {} pp {} dp {} zero {} on {} ranks) in {:.2f} s "
            "(rank 0: HDF5 reads {:.2f} s, unpack+checksum {:.2f} s)",
            path, header.progress.step, header.layout.tp, header.layout.pp, header.layout.dp, header.layout.zero,
            header.layout.world_size, s, phases.io, phases.pack);
  return header;
}

// ---------------------------------------------------------------------------------------------
// Directories, `latest`, resume.

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {};
  static const std::regex pattern(R"(step_(\d+)\.h5)");
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    std::smatch m;
    if (std::regex_match(name, m, pattern) && e.is_regular_file(ec))
      found.push_back({std::stoll(m[1].str()), e.path().string()});
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

std::string latest_checkpoint(const std::string& dir) {
  std::ifstream f(fs::path(dir) / ckpt::kLatestName);
  if (!f) return "";
  std::string name;
  std::getline(f, name);
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
  if (name.empty()) return "";
  return (fs::path(dir) / name).string();
}

std::string resolve_checkpoint(const std::string& file_or_dir) {
  std::error_code ec;
  if (!fs::is_directory(file_or_dir, ec)) return file_or_dir;
  const std::string latest = latest_checkpoint(file_or_dir);
  if (!latest.empty() && fs::exists(latest, ec)) return latest;
  const auto all = list_checkpoints(file_or_dir);
  if (all.empty()) throw CheckpointError(fmt::format("{}: no checkpoint in this directory", file_or_dir));
  return all.front();
}

std::string find_resume_checkpoint(const CheckpointConfig& cfg, std::vector<std::string>* skipped) {
  if (cfg.resume == "never") return "";
  std::error_code ec;
  if (cfg.resume != "auto" && !fs::is_directory(cfg.resume, ec)) {
    read_checkpoint_header(cfg.resume);  // throws when invalid
    return cfg.resume;
  }
  const std::string dir = cfg.resume == "auto" ? cfg.dir : cfg.resume;
  if (dir.empty()) return "";
  const auto all = list_checkpoints(dir);
  for (const auto& c : all) {
    try {
      read_checkpoint_header(c);
      return c;
    } catch (const CheckpointError& e) {
      if (skipped) skipped->push_back(e.what());
    }
  }
  if (!all.empty()) throw CheckpointError(fmt::format("{}: none of its {} checkpoints is valid", dir, all.size()));
  if (cfg.resume != "auto") throw CheckpointError(fmt::format("{}: no checkpoint in this directory", dir));
  return "";
}

std::optional<ResumePoint> resume_checkpoint(const Config& cfg, const std::vector<RankShard>& shards, MPI_Comm comm) {
  const auto& c = cfg.checkpoint;
  if (c.resume == "never") return std::nullopt;
  bool explicit_file = false;
  std::string dir;
  std::vector<std::string> candidates;
  std::string err;
  if (comm_rank(comm) == 0) {
    std::error_code ec;
    if (c.resume == "auto") {
      dir = c.dir;
    } else if (fs::is_directory(c.resume, ec)) {
      dir = c.resume;
    } else {
      explicit_file = true;
      candidates = {c.resume};
    }
    if (!dir.empty()) candidates = list_checkpoints(dir);
    if (c.resume != "auto" && candidates.empty()) err = fmt::format("{}: no checkpoint in this directory", c.resume);
  }
  agree(comm, err);
  std::string joined = fmt::format("{}", fmt::join(candidates, "\n"));
  bcast_string(joined, comm);
  int flag = explicit_file;
  MPI_Bcast(&flag, 1, MPI_INT, 0, comm);
  explicit_file = flag != 0;
  candidates.clear();
  for (size_t p = 0; !joined.empty();) {
    const size_t q = joined.find('\n', p);
    candidates.push_back(joined.substr(p, q == std::string::npos ? std::string::npos : q - p));
    if (q == std::string::npos) break;
    p = q + 1;
  }
  if (candidates.empty()) {
    if (!c.dir.empty()) log::info("checkpoint: no checkpoint in {}: starting fresh", c.dir);
    return std::nullopt;
  }

  ResumePoint rp;
  for (size_t i = 0; i < candidates.size(); ++i) {
    try {
      rp.header = load_checkpoint(candidates[i], cfg, shards, comm);
      if (!rp.skipped.empty())
        log::info("checkpoint: resumed from {} after passing over {} damaged newer checkpoint(s)", candidates[i],
                  rp.skipped.size());
      return rp;
    } catch (const CheckpointError& e) {
      if (explicit_file) throw;
      rp.skipped.push_back(e.what());
      if (comm_rank(comm) == 0)
        log::warn("checkpoint: {} is not usable: {}; {}", candidates[i], e.what(),
                  i + 1 < candidates.size() ? fmt::format("falling back to the previous checkpoint, {}", candidates[i + 1])
                                            : std::string("no older checkpoint left"));
    }
  }
  throw CheckpointError(fmt::format("{}: none of its {} checkpoint(s) is valid ({}); refusing to start fresh over "
                                    "them: remove or move them, or set checkpoint.resume = \"never\"",
                                    c.resume == "auto" ? c.dir : c.resume, candidates.size(),
                                    fmt::join(rp.skipped, "; ")));
}

}  // namespace trident
