// The resharding load: every rank reads its own blocks of every global dataset, whatever layout
// wrote the file, and the checksums are agreed with one all-reduce (docs/checkpoints.md, "Resuming").
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/checksum.hpp"
#include "checkpoint/collective.hpp"
#include "checkpoint/format.hpp"
#include "checkpoint/h5.hpp"
#include "checkpoint/header.hpp"
#include "checkpoint/shard_io.hpp"
#include "core/log.hpp"

namespace trident {

using namespace ckpt;
using ckpt::h5::Handle;

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
          std::fill(buffer, buffer + buffer_elements(shard, kind), 0.f);
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

}  // namespace trident
