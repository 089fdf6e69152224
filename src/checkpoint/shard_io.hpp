#pragma once
// What a rank writes or reads of each dataset (internal, shared by the write and the load): the
// groups of tensors and the shard buffers behind them, this rank's blocks of a dataset, the HDF5
// selections and transfer modes, and the checks of the shards a caller passes.
#include <hdf5.h>
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/format.hpp"
#include "checkpoint/h5.hpp"
#include "checkpoint/shard_map.hpp"

namespace trident::ckpt {

// One tensor group of the file and the buffers behind it.
struct Kind {
  const char* group;
  float* RankShard::*buffer;
  bool optimizer;  // optimizer state: indexed by the optimizer range, owned by optim_owner (as are the
                   // parameters of a shard with params_in_range)
};
inline const Kind kParams{kModelGroup, &RankShard::params, false};
inline const Kind kExpAvg{kExpAvgGroup, &RankShard::exp_avg, true};
inline const Kind kExpAvgSq{kExpAvgSqGroup, &RankShard::exp_avg_sq, true};
inline const Kind kMaster{kMasterGroup, &RankShard::master, true};

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

// Whether the shard's buffer of `kind` holds the optimizer range (else the whole layout), and its size.
bool in_optimizer_range(const RankShard& shard, const Kind& kind);
int64_t buffer_elements(const RankShard& shard, const Kind& kind);

Part part_of(const Held& held, const Kind& kind);

// The tensors of all of this rank's shards by name. The chunks of one rank hold disjoint sets of
// tensors (the two holders of a tied embedding are on different pipeline stages): a tensor in two
// shards is an error, reported in `error`.
std::map<std::string, Held> tensors_by_name(const std::vector<RankShard>& shards, std::string& error);

// Every shard has a layout, an optimizer range inside it and parameters (none needed for an empty
// range with params_in_range) (agreed).
void check_shards(const std::vector<RankShard>& shards, const char* function, MPI_Comm comm);

// Whether any shard of any rank has the buffers `has` looks for (optimizer state, master weights):
// then every shard whose optimizer range is not empty must have them too (a shard with an empty ZeRO
// partition may pass nulls). Collective.
bool any_rank_has(MPI_Comm comm, const std::vector<RankShard>& shards, bool (*has)(const RankShard&),
                  const char* what);
bool has_moments(const RankShard& s);
bool has_master_weights(const RankShard& s);

// Selects `blocks` in a dataset's file space (none when empty).
void select_blocks(hid_t space, size_t ndims, const std::vector<Block>& blocks, const std::string& what);
// A 1-D memory space of n elements (none selected when n = 0).
h5::Handle memory_space(int64_t n);

// Whether data transfers are collective for this run (see shard_io.cpp), and the property list.
bool collective_data(const Config& cfg);
h5::Handle transfer(bool collective);

// Seconds spent in the phases of a write or load on this rank (reported by rank 0).
struct Phases {
  double pack = 0, io = 0, commit = 0;
};
double seconds_since(std::chrono::steady_clock::time_point t);

uint32_t bits_of(float v);

}  // namespace trident::ckpt
