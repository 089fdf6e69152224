// The atomic write protocol: collective HDF5 write of every dataset, checksums and coverage, then
// flush, fsync, rename, `latest`, pruning (docs/checkpoints.md, "Writing" and "Atomicity").
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/checksum.hpp"
#include "checkpoint/collective.hpp"
#include "checkpoint/durable_file.hpp"
#include "checkpoint/format.hpp"
#include "checkpoint/h5.hpp"
#include "checkpoint/header.hpp"
#include "checkpoint/shard_io.hpp"
#include "core/log.hpp"

namespace fs = std::filesystem;

namespace trident {

using namespace ckpt;
using ckpt::h5::Handle;

namespace {

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

}  // namespace

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

}  // namespace trident
