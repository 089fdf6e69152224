// The atomic write protocol: collective HDF5 write of every dataset, checksums and coverage, then
// flush, fsync, rename, `latest`, pruning (docs/checkpoints.md, "Writing" and "Atomicity").
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/checksum.hpp"
#include "checkpoint/directory.hpp"
#include "checkpoint/manifest.hpp"
#include "checkpoint/collective.hpp"
#include "checkpoint/durable_file.hpp"
#include "checkpoint/format.hpp"
#include "checkpoint/h5.hpp"
#include "checkpoint/header.hpp"
#include "checkpoint/shard_io.hpp"
#include "core/fault_injection.hpp"
#include "core/log.hpp"

namespace fs = std::filesystem;

namespace trident {

using namespace ckpt;
using ckpt::h5::Handle;

namespace {

// TRIDENT_INJECT_FAULT=checkpoint-crash:before_rename|before_latest (core/fault_injection.hpp).
CrashPoint crash_point_from_env() {
  const auto point = fault::armed(fault::kCheckpointCrash);
  if (!point) return CrashPoint::None;
  if (*point == "before_rename") return CrashPoint::BeforeRename;
  if (*point == "before_latest") return CrashPoint::BeforeLatest;
  throw Error(fmt::format("TRIDENT_INJECT_FAULT: checkpoint-crash:{} is not a crash point (before_rename, before_latest)", *point));
}

bool stall_before_rename_from_env() {
  const auto point = fault::armed(fault::kCheckpointStall);
  if (!point) return false;
  if (*point == "before_rename") return true;
  throw Error(fmt::format("TRIDENT_INJECT_FAULT: checkpoint-stall:{} is not a stall point (before_rename)", *point));
}

// The crash hooks: a real crash (environment) ends the process; the test hook throws on every rank.
void crash_hook(CrashPoint here, const WriteOptions& options, const char* name) {
  // TRIDENT_INJECT_FAULT=checkpoint-stall:before_rename: a write that cannot finish before Slurm's
  // SIGKILL (tests/slurm: the previous checkpoint must survive it).
  if (here == CrashPoint::BeforeRename && stall_before_rename_from_env()) {
    std::fprintf(stderr, "TRIDENT_INJECT_FAULT=checkpoint-stall:before_rename: stalling until killed\n");
    std::fflush(stderr);
    for (;;) ::pause();
  }
  if (crash_point_from_env() == here) {
    std::fprintf(stderr, "TRIDENT_INJECT_FAULT=checkpoint-crash:%s: exiting as a crash would\n", name);
    std::fflush(stderr);
    std::_Exit(86);
  }
  if (options.crash_at == here) throw InjectedCrash(fmt::format("injected crash {}", name));
}

// Why a write into dir may have failed, for the message: the space left, or the directory's state.
std::string file_system_state(const std::string& dir) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return fmt::format("{} is not accessible: {}", dir, std::strerror(errno));
  if (::access(dir.c_str(), W_OK | X_OK) != 0) return fmt::format("{} is not writable: {}", dir, std::strerror(errno));
  return fmt::format("{} bytes free on the file system of {}", uint64_t(st.f_bavail) * st.f_frsize, dir);
}

// Throws CheckpointError for a failed call that may have done I/O: what failed, HDF5's reason when
// it has one, errno and the state of the file system.
[[noreturn]] void io_fail(const std::string& what, int err, const std::string& dir) {
  const std::string detail = h5::error_text();
  throw CheckpointError(fmt::format("{}{} (errno {}: {}; {})", what, detail.empty() ? "" : " (HDF5: " + detail + ")",
                                    err, std::strerror(err), file_system_state(dir)));
}

// The errors of this rank during the collective part of a write. A local failure (an I/O error on
// this rank only, in a data write, the flush or the close) is remembered instead of thrown, and the
// ranks agree at fixed points whether any failed: every rank then leaves together, and none is left
// waiting in a collective HDF5 call (the deadlock of an exception thrown half-way: the unwinding
// H5Fclose waits for ranks still writing).
class RankErrors {
 public:
  explicit RankErrors(MPI_Comm comm) : comm_(comm) {}
  // Runs f unless this rank has failed already.
  template <class F>
  void run(F f) {
    if (!error_.empty()) return;
    try {
      f();
    } catch (const std::exception& e) {
      error_ = *e.what() ? e.what() : "unknown error";
    }
  }
  // Collective: whether any rank has failed (the same answer on every rank).
  bool any() {
    int mine = error_.empty() ? 0 : 1, any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, comm_);
    return any != 0;
  }
  const std::string& error() const { return error_; }

 private:
  MPI_Comm comm_;
  std::string error_;
};

// One dataset of the file being written, with this rank's partial checksum and element count.
struct DatasetWrite {
  Handle handle;
  std::string name;  // full path, e.g. /model/transformer.wte.weight
  const Kind* kind = nullptr;
  const TensorSpec* spec = nullptr;  // null: the deck
  uint64_t sum = 0;
  int64_t count = 0;
};

std::vector<Kind> kinds_present(bool has_optimizer, bool has_master) {
  std::vector<Kind> k = {kParams};
  if (has_optimizer) {
    k.push_back(kExpAvg);
    k.push_back(kExpAvgSq);
  }
  if (has_master) k.push_back(kMaster);
  return k;
}

// The collective write of one checkpoint file, in steps that every rank takes in the same order:
//   create the file, the scalars and every dataset (metadata only) -> agree
//   rank 0 reserves the file's space (fallocate), so a full file system fails here, before any data
//   is written -> agree
//   each dataset's data -> agree after each collective write, and after the last
//   checksums, coverage, checksum attributes, flush -> agree;  close -> agree
// After a failed agreement every rank closes what is open (collectively), rank 0 removes the partial
// file, and every rank throws the message of the lowest failing rank.
class FileWrite {
 public:
  FileWrite(const std::string& dir, const std::string& tmp_path, const Config& cfg,
            const std::vector<RankShard>& shards, const TrainingProgress& progress, MPI_Comm comm,
            const WriteOptions& options)
      : dir_(dir), tmp_(tmp_path), cfg_(cfg), progress_(progress), comm_(comm), options_(options), errors_(comm),
        specs_(model_tensors(cfg.model)) {
    std::string held_error;
    mine_ = tensors_by_name(shards, held_error);
    for (const auto& [name, held] : mine_) {
      bool known = false;
      for (const auto& s : specs_) known |= s.name == name;
      if (!known) held_error = fmt::format("write_checkpoint: this rank holds tensor {}, which the model of the deck has not", name);
    }
    agree(comm, held_error);
    has_optimizer_ = any_rank_has(comm, shards, has_moments, "the optimizer state buffers (exp_avg, exp_avg_sq)");
    has_master_ = any_rank_has(comm, shards, has_master_weights, "the master weight buffers");
    TRIDENT_CHECK(has_optimizer_ || !has_master_, "write_checkpoint: master weights without optimizer state");
    user_block_ = user_block_bytes(int64_t(specs_.size() * kinds_present(has_optimizer_, has_master_).size()));
  }

  // Writes and closes the file; returns the bytes of tensor data. Throws the agreed error.
  int64_t run(Phases& phases) {
    errors_.run([&] { file_ = h5::create_file(tmp_, comm_, options_.alignment_bytes, user_block_); });
    if (errors_.any()) abandon();
    errors_.run([&] { reserve_space(); });
    if (errors_.any()) abandon();
    errors_.run([&] { create_datasets(); });
    if (errors_.any()) abandon();
    for (auto& d : datasets_) {
      errors_.run([&] { write_data(d, phases); });
      // Before the next collective H5Dwrite every rank must know; independent writes need no agreement
      // in between (a failed rank skips the rest), which saves one all-reduce per dataset.
      if (writes_collectively(d) && errors_.any()) abandon();
    }
    if (errors_.any()) abandon();
    errors_.run([&] { finish(); });
    if (errors_.any()) abandon();
    errors_.run([&] { file_.close(tmp_ + ": closing the file"); });
    if (errors_.any()) abandon();
    return data_bytes_;
  }
  int64_t user_block() const { return user_block_; }
  const std::vector<Extent>& data_extents() const { return extents_; }

 private:
  // The scalars and every dataset: metadata only (the datasets are allocated early, without fill).
  void create_datasets() {
    write_scalars(file_, cfg_, progress_, comm_size(comm_), has_optimizer_, has_master_, tmp_);
    DatasetWrite deck;
    deck.name = kDeckDataset;
    Handle type = h5::string_type(cfg_.resolved_toml.size());
    Handle space(H5Screate(H5S_SCALAR), H5Sclose);
    deck.handle = Handle(H5Dcreate2(file_, kDeckDataset, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
    if (!deck.handle.valid()) h5::fail(fmt::format("{}: cannot create dataset {}", tmp_, kDeckDataset));
    datasets_.push_back(std::move(deck));
    Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
    for (const Kind& kind : kinds_present(has_optimizer_, has_master_)) {
      Handle group = h5::exists(file_, kind.group) ? h5::open_group(file_, kind.group, tmp_)
                                                   : h5::create_group(file_, kind.group, tmp_);
      kinds_.push_back(kind);
      for (const auto& s : specs_) {
        DatasetWrite d;
        d.name = std::string(kind.group) + "/" + s.name;
        d.spec = &s;
        std::vector<hsize_t> dims(s.shape.begin(), s.shape.end());
        Handle fspace(H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose);
        d.handle = Handle(H5Dcreate2(group, s.name.c_str(), H5T_IEEE_F32LE, fspace, H5P_DEFAULT, dcpl, H5P_DEFAULT),
                          H5Dclose);
        if (!d.handle.valid()) h5::fail(fmt::format("{}: dataset {}: cannot create", tmp_, d.name));
        datasets_.push_back(std::move(d));
      }
    }
    for (size_t i = 1; i < datasets_.size(); ++i)
      datasets_[i].kind = &kinds_[(i - 1) / specs_.size()];
  }

  // Rank 0 reserves the space the file will take (fallocate) before HDF5 writes anything but the
  // superblock: the tensor data, the deck and an allowance for HDF5's metadata (64 KiB + 1 KiB per
  // dataset; about 0.5 KiB are used). A full file system then fails here, on rank 0, between two
  // agreements. Later it could fail inside HDF5's collective metadata writes, where a rank's failure
  // leaves the ranks' HDF5 states apart and even the collective close can wait forever. Without
  // the file system's support (EOPNOTSUPP) nothing is reserved.
  void reserve_space() {
    if (comm_rank(comm_) != 0) return;
    const auto kinds = kinds_present(has_optimizer_, has_master_);
    off_t reserve = off_t(user_block_) + off_t(cfg_.resolved_toml.size()) + off_t(64 << 10);
    for (const auto& s : specs_) reserve += off_t(kinds.size()) * (off_t(s.numel()) * 4 + 1024);
    const int fd = ::open(tmp_.c_str(), O_WRONLY);
    if (fd < 0) io_fail(fmt::format("{}: cannot open to reserve space", tmp_), errno, dir_);
    const int rc = ::fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, reserve);
    const int err = errno;
    ::close(fd);
    if (rc != 0 && err != EOPNOTSUPP && err != ENOSYS && err != EINVAL)
      io_fail(fmt::format("{}: cannot reserve {} bytes for the checkpoint", tmp_, int64_t(reserve)), err, dir_);
  }

  // The deck is always written collectively (rank 0 holds it, the others select nothing).
  bool writes_collectively(const DatasetWrite& d) const { return !d.spec || collective_data(cfg_); }

  void write_data(DatasetWrite& d, Phases& phases) {
    if (!d.spec) return write_deck(d);
    const TensorSpec& s = *d.spec;
    auto it = mine_.find(s.name);
    Part part = part_of(it == mine_.end() ? Held{} : it->second, *d.kind);
    if (!part.owner) part.blocks.clear();  // replicas and lower-stage duplicates write nothing
    const int64_t cols = s.shape.size() > 1 ? s.shape[1] : 1;
    const int64_t n = total_count(part.blocks);
    packed_.resize(size_t(std::max<int64_t>(n, 1)));
    auto t = std::chrono::steady_clock::now();
    for_each_element(part.blocks, cols, [&](int64_t di, int64_t si, int64_t pi) {
      const float v = part.buffer[part.offset + si];
      packed_[size_t(pi)] = v;
      d.sum += element_hash(uint64_t(di), bits_of(v));
    });
    d.count = n;
    phases.pack += seconds_since(t);
    t = std::chrono::steady_clock::now();
    const std::string what = fmt::format("{}: dataset {}", tmp_, d.name);
    Handle fspace(H5Dget_space(d.handle), H5Sclose);
    select_blocks(fspace, s.shape.size(), part.blocks, what);
    Handle mspace = memory_space(n);
    const herr_t rc = H5Dwrite(d.handle, H5T_NATIVE_FLOAT, mspace, fspace, transfer(collective_data(cfg_)), packed_.data());
    const int err = errno;
    phases.io += seconds_since(t);
    if (rc < 0) io_fail(what + ": cannot write", err, dir_);
    if (options_.fail_write_on_rank == comm_rank(comm_)) io_fail(what + ": cannot write (injected I/O error)", EIO, dir_);
  }

  // Rank 0 writes the deck, the others take part in the collective write with nothing selected.
  void write_deck(DatasetWrite& d) {
    const std::string& text = cfg_.resolved_toml;
    Handle type = h5::string_type(text.size());
    Handle fspace(H5Dget_space(d.handle), H5Sclose);
    Handle mspace(H5Screate(H5S_SCALAR), H5Sclose);
    if (comm_rank(comm_) != 0) {
      H5Sselect_none(fspace);
      H5Sselect_none(mspace);
    }
    std::string buf = text.empty() ? std::string(1, '\0') : text;
    const herr_t rc = H5Dwrite(d.handle, type, mspace, fspace, transfer(true), buf.data());
    if (rc < 0) io_fail(fmt::format("{}: cannot write dataset {}", tmp_, d.name), errno, dir_);
    if (comm_rank(comm_) != 0) return;  // the checksum and count are summed over the ranks
    for (size_t i = 0; i < text.size(); ++i) d.sum += element_hash(i, uint8_t(text[i]));
    d.count = 1;
  }

  // Checksums and coverage (every element written by exactly one rank), the checksum attributes,
  // the data extents for the manifest, then the flush.
  void finish() {
    std::vector<uint64_t> sums, total_sums(datasets_.size());
    std::vector<int64_t> counts, total_counts(datasets_.size());
    for (const auto& d : datasets_) {
      sums.push_back(d.sum);
      counts.push_back(d.count);
    }
    MPI_Allreduce(sums.data(), total_sums.data(), int(sums.size()), MPI_UINT64_T, MPI_SUM, comm_);
    MPI_Allreduce(counts.data(), total_counts.data(), int(counts.size()), MPI_INT64_T, MPI_SUM, comm_);
    for (size_t i = 1; i < datasets_.size(); ++i)
      if (total_counts[i] != datasets_[i].spec->numel())
        throw CheckpointError(fmt::format(
            "{}: dataset {}: the ranks wrote {} elements of {}; every element must be written by exactly one rank "
            "(see the ownership rules of RankShard)",
            tmp_, datasets_[i].name, total_counts[i], datasets_[i].spec->numel()));
    for (size_t i = 0; i < datasets_.size(); ++i) {
      h5::write_attr_u64(datasets_[i].handle, "checksum", total_sums[i]);
      if (!datasets_[i].spec) continue;
      data_bytes_ += datasets_[i].spec->numel() * 4;
      extents_.push_back({int64_t(H5Dget_offset(datasets_[i].handle)), int64_t(H5Dget_storage_size(datasets_[i].handle))});
    }
    for (auto& d : datasets_) d.handle.close(tmp_ + ": closing a dataset");
    if (H5Fflush(file_, H5F_SCOPE_GLOBAL) < 0) io_fail(tmp_ + ": H5Fflush", errno, dir_);
  }

  // After a failed agreement: every rank closes what is open (H5Fclose is collective), rank 0
  // removes the partial file, every rank throws the first error.
  [[noreturn]] void abandon() {
    datasets_.clear();
    file_.reset();
    if (comm_rank(comm_) == 0) std::remove(tmp_.c_str());
    std::string err = errors_.error();
    if (!err.empty())
      err += fmt::format("; checkpoint of step {} not written: the previous checkpoints and `latest` are unchanged, "
                         "the partial file {} was removed",
                         progress_.step, tmp_);
    agree(comm_, err);
    throw CheckpointError("write_checkpoint: the ranks disagree about a failure");  // not reached: agree threw
  }

  std::string dir_, tmp_;
  const Config& cfg_;
  TrainingProgress progress_;
  MPI_Comm comm_;
  WriteOptions options_;
  RankErrors errors_;
  std::vector<TensorSpec> specs_;
  std::map<std::string, Held> mine_;
  bool has_optimizer_ = false, has_master_ = false;
  int64_t user_block_ = 0;
  Handle file_;
  std::vector<Kind> kinds_;
  std::vector<DatasetWrite> datasets_;  // the deck first, then the tensors of kinds_ in specs_ order
  std::vector<float> packed_;
  std::vector<Extent> extents_;
  int64_t data_bytes_ = 0;
};

// Leftovers of interrupted writes: removed before a write, so a crash's partial file does not hold
// the space the next write needs (nothing else writes into the directory).
void remove_leftovers(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, std::regex(R"(step_\d+\.h5\.tmp)"))) {
      log::info("checkpoint: removing {} (left by an interrupted write)", e.path().string());
      fs::remove(e.path(), ec);
    }
  }
}

// Deletes the oldest checkpoints beyond `keep`, ordered by the step they hold: never one newer than
// the checkpoint just written, never a stray copy (a file whose content is another step than its
// name), which is reported instead.
void prune(const std::string& dir, int64_t keep, int64_t written_step) {
  if (keep <= 0) return;
  int64_t kept = 0;
  for (const auto& c : scan_checkpoints(dir)) {
    if (c.stray()) {
      // Said once per file, not at every write that prunes.
      static std::set<std::string> reported;
      if (reported.insert(c.path).second) log::warn("checkpoint: {}: never deleted by keep", stray_reason(c));
      continue;
    }
    if (c.name_step > written_step) continue;
    if (++kept <= keep) continue;
    log::info("checkpoint: deleting {} (keep = {})", c.path, keep);
    std::error_code ec;
    if (!fs::remove(c.path, ec) && ec) log::warn("checkpoint: cannot delete {}: {}", c.path, ec.message());
  }
}

}  // namespace

std::string checkpoint_file_name(int64_t step) { return fmt::format("step_{:08d}.h5", step); }

std::string write_checkpoint(const std::string& dir, const Config& cfg, const std::vector<RankShard>& shards,
                             const TrainingProgress& progress, MPI_Comm comm, const WriteOptions& options) {
  TRIDENT_CHECK(!dir.empty(), "write_checkpoint: empty directory");
  check_shards(shards, "write_checkpoint", comm);

  const auto t0 = std::chrono::steady_clock::now();
  const std::string final_path = (fs::path(dir) / checkpoint_file_name(progress.step)).string();
  const std::string tmp_path = final_path + ".tmp";
  on_root(comm, [&] {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec)
      throw CheckpointError(fmt::format("cannot create checkpoint directory '{}': {} ({})", dir, ec.message(),
                                        file_system_state(fs::path(dir).parent_path().string())));
    remove_leftovers(dir);
  });

  int64_t bytes = 0;
  Phases phases;
  auto commit_start = std::chrono::steady_clock::now();
  {
    FileWrite file(dir, tmp_path, cfg, shards, progress, comm, options);
    bytes = file.run(phases);
    commit_start = std::chrono::steady_clock::now();
    on_root(comm, [&] { seal_checkpoint(tmp_path, progress.step, file.user_block(), file.data_extents()); });
  }

  // Commit: the data and the manifest are on disk (seal_checkpoint fsyncs) before the rename makes
  // the file visible under its final name, and the rename is on disk before `latest` names it.
  crash_hook(CrashPoint::BeforeRename, options, "before_rename");
  on_root(comm, [&] {
    rename_path(tmp_path, final_path);
    fsync_path(dir, true);
  });
  crash_hook(CrashPoint::BeforeLatest, options, "before_latest");
  on_root(comm, [&] {
    write_text_atomically((fs::path(dir) / ckpt::kLatestName).string(), checkpoint_file_name(progress.step) + "\n");
    prune(dir, cfg.checkpoint.keep, progress.step);
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  phases.commit = seconds_since(commit_start);
  if (options.stats) {
    *options.stats = WriteStats{bytes, s, phases.pack, phases.io, phases.commit, collective_data(cfg)};
    return final_path;
  }
  log::info("checkpoint: wrote {} (step {}, {:.1f} MiB in {:.2f} s, {:.0f} MiB/s; rank 0: pack+checksum {:.2f} s, "
            "HDF5 writes {:.2f} s ({}), flush+fsync+rename+latest {:.2f} s)",
            final_path, progress.step, bytes / 1048576.0, s, bytes / 1048576.0 / std::max(s, 1e-9), phases.pack,
            phases.io, collective_data(cfg) ? "collective" : "independent", phases.commit);
  return final_path;
}

}  // namespace trident
