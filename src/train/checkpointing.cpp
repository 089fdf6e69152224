#include "train/checkpointing.hpp"

#include <chrono>
#include <filesystem>
#include <optional>

#include "checkpoint/directory_lock.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "train/checkpoint_progress.hpp"
#include "train/progress.hpp"

namespace fs = std::filesystem;

namespace trident {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Rank 0 checks checkpoint.dir as `trident check` does, creates it and takes its lock, so that a bad
// path or a directory another run writes fails at start-up rather than at the first checkpoint, hours
// in. Collective: every rank throws alike. Returns rank 0's lock (null elsewhere).
std::unique_ptr<ckpt::DirectoryLock> prepare_directory(const Config& cfg, MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::string err;
  std::unique_ptr<ckpt::DirectoryLock> lock;
  if (rank == 0) {
    const std::string& dir = cfg.checkpoint.dir;
    try {
      check_checkpoint_dir(dir);
      std::error_code ec;
      fs::create_directories(dir, ec);
      if (ec) throw Error(fmt::format("[checkpoint] dir = \"{}\" cannot be created: {}", dir, ec.message()));
      lock = std::make_unique<ckpt::DirectoryLock>(dir);
    } catch (const Error& e) {
      err = fmt::format("{}: {}", cfg.source, e.what());
    }
  }
  int64_t n = int64_t(err.size());
  MPI_Bcast(&n, 1, MPI_INT64_T, 0, comm);
  err.resize(size_t(n));
  MPI_Bcast(err.data(), int(n), MPI_CHAR, 0, comm);
  if (!err.empty()) throw Error(err);
  return lock;
}

}  // namespace

TrainingCheckpoints::TrainingCheckpoints(const Config& cfg, Kernels& kernels, ParallelMesh* mesh,
                                         const std::vector<std::unique_ptr<GptModel>>& chunks,
                                         const std::vector<std::unique_ptr<AdamW>>& optimizers,
                                         GradientReducer* reducer)
    : cfg_(cfg),
      k_(kernels),
      mesh_(mesh),
      chunks_(chunks),
      optimizers_(optimizers),
      reducer_(reducer),
      zero3_(reducer && reducer->zero() == 3),
      comm_(mesh ? mesh->world().mpi_comm() : MPI_COMM_WORLD),
      schedule_(cfg.checkpoint, cfg.train.steps, comm_) {
  TRIDENT_CHECK(chunks_.size() == optimizers_.size(), "TrainingCheckpoints: {} chunks but {} optimizers",
                chunks_.size(), optimizers_.size());
}

TrainingCheckpoints::~TrainingCheckpoints() = default;

// (Decided by the configuration, so that every rank agrees whatever the size of its range.)
bool TrainingCheckpoints::parameters_kept_in_range() const { return zero3_ || cfg_.train.bf16_working_copy(); }

float* TrainingCheckpoints::parameters_in_range(size_t c) const {
  return zero3_ ? reducer_->range_parameters(int(c)) : optimizers_[c]->masters();
}

// Ownership (see RankShard): DP replicas hold the same parameters, written by dp rank 0; without
// ZeRO the same optimizer state too, while with ZeRO each DP rank owns its partition. The LM head's
// copy of a tied embedding (a last chunk without the embedding) is written by the first stage.
// Parameters kept in the optimizer's range (ZeRO-3, a bf16 working copy's masters) are written by
// range, like the moments, so no rank gathers its chunk. On a host backend the shards are the
// model's and optimizer's own buffers (no second copy of the rank's state); otherwise, and for a load
// that needs the whole chunk where the optimizer keeps a range, host staging buffers.
TrainingCheckpoints::Staging TrainingCheckpoints::make_staging(StagingFor use) const {
  Staging st;
  const bool write = use == StagingFor::Write;
  st.in_place = k_.host_memory() && (write || !parameters_kept_in_range());
  if (st.in_place) k_.fence();
  const int dp_rank = mesh_ ? mesh_->coord().dp : 0;
  for (size_t c = 0; c < chunks_.size(); ++c) {
    const ParameterLayout& layout = chunks_[c]->layout();
    const AdamW& optimizer = *optimizers_[c];
    const int64_t moments = optimizer.end() - optimizer.begin();
    RankShard s;
    s.layout = &layout;
    // Uninitialised: the pages cost nothing until a load or a copy fills them.
    const auto staging = [&](int64_t n) { return st.buffers.emplace_back(new float[size_t(n)]).get(); };
    s.params_in_range = write && parameters_kept_in_range();
    float* own = s.params_in_range ? parameters_in_range(c) : chunks_[c]->params();
    s.params = st.in_place ? own : staging(s.params_in_range ? moments : layout.total());
    s.exp_avg = st.in_place ? optimizers_[c]->exp_avg() : staging(moments);
    s.exp_avg_sq = st.in_place ? optimizers_[c]->exp_avg_sq() : staging(moments);
    s.optim_begin = optimizer.begin();
    s.optim_end = optimizer.end();
    s.params_owner = dp_rank == 0;
    s.optim_owner = cfg_.mesh.zero > 0 || dp_rank == 0;
    if (layout.wte() >= 0 && !layout.has_embedding()) s.not_owned.push_back(layout.wte_name());
    st.shards.push_back(std::move(s));
  }
  return st;
}

int64_t TrainingCheckpoints::resume() {
  const auto& c = cfg_.checkpoint;
  if (!c.dir.empty()) lock_ = prepare_directory(cfg_, comm_);
  if (c.resume == "never") {
    if (!c.dir.empty()) log::info("checkpoint: resume = \"never\": starting fresh (checkpoints go to {})", c.dir);
    return 0;
  }
  if (c.resume == "auto" && c.dir.empty()) return 0;

  const auto start = std::chrono::steady_clock::now();
  Staging st = make_staging(StagingFor::Load);
  const auto point = resume_checkpoint(cfg_, st.shards, comm_);
  if (!point) return 0;  // resume_checkpoint said "no checkpoint in DIR: starting fresh"
  for (size_t i = 0; i < chunks_.size() && !st.in_place; ++i) {
    const RankShard& s = st.shards[i];
    const int64_t moments = s.optim_stop() - s.optim_begin;
    if (parameters_kept_in_range())  // this rank's range of the chunk (bf16: the masters; the trainer
                                     // writes the working copy from them)
      k_.copy_to_device(parameters_in_range(i), s.params + s.optim_begin, moments);
    else
      k_.copy_to_device(chunks_[i]->params(), s.params, s.layout->total());
    k_.copy_to_device(optimizers_[i]->exp_avg(), s.exp_avg, moments);
    k_.copy_to_device(optimizers_[i]->exp_avg_sq(), s.exp_avg_sq, moments);
  }
  k_.fence();

  const CheckpointHeader& h = point->header;
  const SavedLayout& l = h.layout;
  const int64_t step = h.progress.step;
  log::info("checkpoint: resumed from {} (step {}, written with tp {} pp {} dp {} zero {} virtual_stages {} on {} "
            "ranks) in {:.2f} s; training continues at step {} of {}",
            h.path, step, l.tp, l.pp, l.dp, l.zero, l.virtual_stages, l.world_size, seconds_since(start), step + 1,
            cfg_.train.steps);
  if (!cfg_.model.init_from.empty())
    log::info("checkpoint: model.init_from ({}) is superseded by the checkpoint", cfg_.model.init_from);
  if (step >= cfg_.train.steps)
    log::info("checkpoint: step {} already reaches train.steps = {}: nothing left to train", step, cfg_.train.steps);
  // The batch of step s is a function of (s, data.seed, global_batch): with other values the run
  // goes on, but its data order is no longer the interrupted run's.
  if (log::is_root() && h.progress.data_seed != cfg_.data.seed)
    log::warn("checkpoint: written with data.seed {}, this run has {}: the data order differs from the interrupted "
              "run's",
              h.progress.data_seed, cfg_.data.seed);
  if (log::is_root() && step > 0 && h.progress.consumed_samples != step * cfg_.train.global_batch)
    log::warn("checkpoint: written with global_batch {}, this run has {}: batches continue by step number, so the "
              "data order differs from the interrupted run's",
              h.progress.consumed_samples / step, cfg_.train.global_batch);
  return step;
}

void TrainingCheckpoints::after_step(int64_t step, double loss) {
  const auto decision = schedule_.should_write(step);
  if (!decision.write) return;
  const auto start = std::chrono::steady_clock::now();
  Staging st = make_staging(StagingFor::Write);
  // write_checkpoint reads only what a shard owns: replicas skip the copy (and never touch the
  // staging pages), so the cost per rank falls with dp.
  for (size_t i = 0; i < chunks_.size() && !st.in_place; ++i) {
    const RankShard& s = st.shards[i];
    const int64_t moments = s.optim_stop() - s.optim_begin;
    if (s.params_in_range && s.optim_owner)
      k_.copy_to_host(s.params, parameters_in_range(i), moments);
    else if (!s.params_in_range && s.params_owner)
      k_.copy_to_host(s.params, chunks_[i]->params(), s.layout->total());
    if (s.optim_owner) {
      k_.copy_to_host(s.exp_avg, optimizers_[i]->exp_avg(), moments);
      k_.copy_to_host(s.exp_avg_sq, optimizers_[i]->exp_avg_sq(), moments);
    }
  }
  const double copy_s = seconds_since(start);
  if (lock_) lock_->check_still_held();  // rank 0: never write over another run's checkpoints
  WriteStats stats;
  std::string path;
  {
    std::optional<CheckpointWriteProgress> progress;
    if (log::is_root()) progress.emplace(step, (fs::path(cfg_.checkpoint.dir) / checkpoint_file_name(step)).string());
    WriteOptions options;
    options.stats = &stats;
    path = write_checkpoint(cfg_.checkpoint.dir, cfg_, st.shards, progress_after_step(cfg_, step, loss), comm_, options);
  }
  const double total_s = seconds_since(start);
  last_written_ = path;
  last_written_step_ = step;
  if (log::is_root()) {
    std::error_code ec;
    const auto bytes = fs::file_size(path, ec);
    const double gb = double(ec ? stats.bytes : int64_t(bytes)) / 1e9;
    // One line per checkpoint: the whole time, then its phases.
    log::info("checkpoint: step {} ({}) -> {}: {} in {:.2f} s, {:.3g} GB/s (device-to-host copy {:.2f} s, "
              "pack+checksum {:.2f} s, HDF5 writes {:.2f} s ({}), flush+fsync+rename+latest {:.2f} s)",
              step, decision.reason, path, gb >= 1 ? fmt::format("{:.2f} GB", gb) : fmt::format("{:.1f} MB", gb * 1e3),
              total_s, gb / std::max(total_s, 1e-9), copy_s, stats.pack, stats.io,
              stats.collective ? "collective" : "independent", stats.commit);
  }
}

}  // namespace trident
