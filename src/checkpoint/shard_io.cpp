#include "checkpoint/shard_io.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "checkpoint/collective.hpp"
#include "core/error.hpp"

namespace trident::ckpt {

using h5::Handle;

bool in_optimizer_range(const RankShard& shard, const Kind& kind) { return kind.optimizer || shard.params_in_range; }

int64_t buffer_elements(const RankShard& shard, const Kind& kind) {
  return in_optimizer_range(shard, kind) ? shard.optim_stop() - shard.optim_begin : shard.layout->total();
}

Part part_of(const Held& held, const Kind& kind) {
  Part p;
  if (!held.tensor) return p;
  const RankShard& shard = *held.shard;
  const ParamTensor* t = held.tensor;
  p.buffer = shard.*(kind.buffer);
  const ParameterLayout& L = *shard.layout;
  int64_t begin = 0, end = t->numel;
  const bool ranged = in_optimizer_range(shard, kind);
  if (ranged) {
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
  // Tensors replicated over the TP group (LayerNorms, wpe, row-parallel biases): TP rank 0 owns them;
  // a slice held by several ranks (k_proj, v_proj with tp > kv_heads): the first of them.
  const bool tp_replica = (t->split == TpSplit::None && L.tp_rank() != 0) || L.tp_rank() % t->replicas != 0;
  p.owner = !listed && !tp_replica && (ranged ? shard.optim_owner : shard.params_owner);
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
    if (!shard.layout)
      err = fmt::format("{}: a shard has no layout", function);
    else if (shard.optim_begin < 0 || shard.optim_stop() > shard.layout->total() || shard.optim_begin > shard.optim_stop())
      err = fmt::format("{}: optimizer range [{}, {}) outside the layout's {} elements", function, shard.optim_begin,
                        shard.optim_stop(), shard.layout->total());
    else if (!shard.params && buffer_elements(shard, kParams) > 0)  // (an empty range may pass none)
      err = fmt::format("{}: a shard has no parameters", function);
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

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

uint32_t bits_of(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

bool any_rank_has(MPI_Comm comm, const std::vector<RankShard>& shards, bool (*has)(const RankShard&),
                  const char* what) {
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

}  // namespace trident::ckpt
