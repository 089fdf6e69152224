#pragma once
// Checkpoints: one parallel HDF5 file per checkpoint, written collectively through MPI-IO
// (docs/checkpoints.md is the full specification; this header is the API).
//
// File DIR/step_<8 digits>.h5:
//   /model/<hf name>                 parameters, float32, global unpadded Hugging Face shape
//                                    (Conv1D weights [in, out], vocabulary rows V, never Vp)
//   /optim/exp_avg/<hf name>         AdamW first moment, same name and shape
//   /optim/exp_avg_sq/<hf name>      AdamW second moment
//   /optim/master/<hf name>          fp32 master weights, only when the run keeps them
//   /deck                            the resolved deck (TOML text)
//   attributes: format, format_version, step; /train, /rng, /lr_schedule, /data, /layout, /model,
//   /optim hold the scalars; every dataset carries a `checksum` attribute (see checksum.hpp).
// Every rank writes only its own hyperslabs of each global dataset; any other layout reads its own
// hyperslabs back, so resharding (tp, pp, dp, zero, virtual_stages) needs no conversion step.
//
// Every file starts with a manifest (manifest.hpp) that readers check before HDF5 parses the file.
// Atomicity: written as step_N.h5.tmp, H5Fflush (MPI_File_sync) + close + manifest + fsync, renamed to
// step_N.h5, directory fsynced, then DIR/latest (one line naming the file) replaced the same way,
// and only then are checkpoints beyond `keep` deleted. A crash at any point leaves every earlier
// checkpoint and a `latest` that names a complete one.
//
// What the trainer calls (all collective over the communicator given, the world; src/train/checkpointing.hpp
// does it for Trainer), with one RankShard per pipeline chunk of the rank:
//   start-up:   resume_checkpoint(cfg, shards, comm) -> nullopt (start fresh) or the header loaded;
//               copy the host buffers to the device, continue at header.progress.step + 1.
//   each step:  schedule.should_write(step)           (collective decision)
//               -> write_checkpoint(cfg.checkpoint.dir, cfg, shards, progress, comm)
//                  (progress: progress_after_step in src/train/progress.hpp)
//   signals:    request_checkpoint()                   (async-signal-safe)
#include <mpi.h>

#include <csignal>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_error.hpp"
#include "core/error.hpp"
#include "core/config.hpp"
#include "model/parameters.hpp"

namespace trident {

// Format version written by this build; a reader refuses files with a larger one.
inline constexpr int64_t kCheckpointFormatVersion = 1;

// The training state of one pipeline chunk of a rank, as HOST buffers in the chunk's ParameterLayout
// (a TP slice of the chunk's tensors). A rank passes one shard per chunk it holds (several with
// virtual_stages > 1; their layouts hold disjoint tensors). The write functions read the buffers,
// the load functions fill them.
//
// Ownership (who writes, and whose data the checksums are computed from): every element of every
// dataset must be written by exactly one rank; write_checkpoint checks the element counts and
// refuses to commit a checkpoint otherwise. The rules for the layouts of trident:
//   * TP ranks hold disjoint slices: all own theirs. Tensors replicated over the TP group
//     (TpSplit::None: LayerNorms, wpe, row-parallel biases) are owned by TP rank 0 automatically.
//   * DP replicas hold the same parameters: only dp rank 0 sets params_owner. Without ZeRO they hold
//     the same optimizer state too: only dp rank 0 sets optim_owner. With ZeRO-1/2 every DP rank owns
//     its partition [optim_begin, optim_end) of the optimizer state.
//   * Parameters that live in the optimizer's range (params_in_range: ZeRO-3's partitions, a bf16
//     run's fp32 masters) are written like the optimizer state: each optim_owner its range.
//   * A tensor held by two pipeline stages (the tied embedding: transformer.wte.weight on the first
//     stage's first chunk, used as the LM head by the last stage's last chunk) is written by the
//     LOWEST pipeline stage that holds it; the other chunk lists its name in not_owned.
// On load every rank reads everything it holds whatever the flags; the owners' partial checksums
// verify the data read (a dataset not covered exactly once is verified by a separate read).
struct RankShard {
  const ParameterLayout* layout = nullptr;
  float* params = nullptr;      // layout->total() floats (padding rows are written as zero on load)
  // Optimizer state for the flat elements [optim_begin, optim_end) of the layout: exp_avg[k] is
  // element optim_begin + k. Null exp_avg/exp_avg_sq on every rank: no optimizer state at all
  // (a rank with an empty range may pass nulls while others hold state).
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  float* master = nullptr;      // fp32 master weights (mixed precision), same range; null: none
  int64_t optim_begin = 0;
  int64_t optim_end = -1;       // -1: layout->total()
  bool params_owner = true;
  bool optim_owner = true;
  // params holds the optimizer range's values only, indexed and owned like the moments (params[k] is
  // element optim_begin + k; written by optim_owner): ZeRO-3's partitions and a bf16 run's masters
  // are written where they live, nothing gathered. False: all layout->total() values.
  bool params_in_range = false;
  std::vector<std::string> not_owned;  // tensors held here but written by a lower pipeline stage

  int64_t optim_stop() const { return optim_end < 0 ? layout->total() : optim_end; }
};

// The scalar state of training after a completed step. The RNGs of trident are counter-based
// (initialisation: f(seed, tensor, index); shuffle: f(seed, epoch)), so their state is (seed,
// counter), and the LR schedule is a function of the step.
struct TrainingProgress {
  int64_t step = 0;              // optimizer steps completed; training resumes at step + 1
  int64_t optimizer_step = 0;    // AdamW's step count (bias correction) after the last update
  int64_t data_step = 0;         // 0-based global step of the next training batch (BatchSampler)
  int64_t consumed_samples = 0;  // sequences consumed so far
  uint64_t model_seed = 0;       // model.seed
  uint64_t data_seed = 0;        // data.seed (shuffle order)
  double lr = 0;                 // learning rate of the last step
  double loss = 0;               // loss of the last step (informational; NaN when unknown)
};

// The parallel layout a checkpoint was written with (informational: any layout can read it).
struct SavedLayout {
  int tp = 1, pp = 1, dp = 1, zero = 0, virtual_stages = 1;
  bool sequence_parallel = false;
  int world_size = 1;
  std::string order = "tp-dp-pp";
};

struct CheckpointDataset {
  std::string name;              // e.g. "/model/transformer.h.0.attn.c_attn.weight"
  std::vector<int64_t> shape;
  uint64_t checksum = 0;         // the stored `checksum` attribute
};

// Everything in a checkpoint but the tensor data (read by one rank, serially).
struct CheckpointHeader {
  std::string path;
  int64_t format_version = 0;
  std::string created_utc, trident_version;
  TrainingProgress progress;
  SavedLayout layout;
  ModelConfig model;             // vocab_size, seq_len, layers, hidden, heads, ffn_hidden (resolved),
                                 // tie_embeddings, init_std, seed
  std::string lr_schedule;       // the schedule's name, for inspection
  bool has_optimizer = false, has_master = false;
  std::string deck;              // resolved TOML
  uint64_t deck_checksum = 0;
  std::vector<CheckpointDataset> datasets;  // tensor datasets, in file order of the groups
};

// Test hooks: stop (throw InjectedCrash) at a point of the write protocol, leaving the files as a
// crash there would. The environment variable TRIDENT_INJECT_FAULT=checkpoint-crash:before_rename|before_latest
// makes a real process _exit(86) at that point instead (for end-to-end tests of `trident train`).
enum class CrashPoint { None, BeforeRename, BeforeLatest };
class InjectedCrash : public Error {
 public:
  using Error::Error;
};

// What a write took: the file's bytes and the phases on rank 0.
struct WriteStats {
  int64_t bytes = 0;
  double seconds = 0, pack = 0, io = 0, commit = 0;  // whole write; pack+checksum, HDF5 writes, flush to latest
  bool collective = false;                           // collective (MPI-IO) data writes
};

struct WriteOptions {
  // Filled when given; write_checkpoint then leaves its log line to the caller (the trainer prints one
  // line per checkpoint with the staging time too).
  WriteStats* stats = nullptr;
  CrashPoint crash_at = CrashPoint::None;
  int64_t alignment_bytes = 0;   // H5Pset_alignment for datasets >= 1 MiB (file-system stripe size); 0 = off
  // Test hook: this rank's first tensor data write fails as an I/O error would (after the call, so
  // the other ranks have completed theirs). -1: none.
  int fail_write_on_rank = -1;
};

// "step_00000123.h5"
std::string checkpoint_file_name(int64_t step);

// Collective over comm. Writes DIR/step_N.h5 (N = progress.step) atomically from this rank's shards
// (one per pipeline chunk), updates DIR/latest and deletes the oldest checkpoints beyond
// cfg.checkpoint.keep (0 keeps all). Returns the path. The model and layout recorded come from cfg
// (cfg.model, cfg.mesh, cfg.resolved_toml).
std::string write_checkpoint(const std::string& dir, const Config& cfg, const std::vector<RankShard>& shards,
                             const TrainingProgress& progress, MPI_Comm comm, const WriteOptions& options = {});

// Collective over comm. Fills the buffers of this rank's shards from checkpoint `path` whatever layout
// wrote it: parameters always, optimizer state when exp_avg is set (master weights when master is
// set; from /model when the checkpoint has none). Verifies the format version, the model (every
// dataset's shape against cfg.model) and the checksum of every dataset read. Throws CheckpointError
// (on every rank alike) naming the file and dataset.
CheckpointHeader load_checkpoint(const std::string& path, const Config& cfg, const std::vector<RankShard>& shards,
                                 MPI_Comm comm);

// A rank holding a single chunk.
inline std::string write_checkpoint(const std::string& dir, const Config& cfg, const RankShard& shard,
                                    const TrainingProgress& progress, MPI_Comm comm, const WriteOptions& options = {}) {
  return write_checkpoint(dir, cfg, std::vector<RankShard>{shard}, progress, comm, options);
}
inline CheckpointHeader load_checkpoint(const std::string& path, const Config& cfg, RankShard& shard, MPI_Comm comm) {
  return load_checkpoint(path, cfg, std::vector<RankShard>{shard}, comm);
}

struct ResumePoint {
  CheckpointHeader header;             // of the checkpoint loaded
  std::vector<std::string> skipped;    // damaged newer checkpoints passed over, each with its reason
};

// Collective. What checkpoint.resume asks for, loaded into this rank's shards:
//   "never" (or checkpoint.dir empty with "auto"): nullopt, start fresh;
//   "auto": the newest checkpoint in checkpoint.dir that loads and verifies; a damaged one is skipped
//           with a warning naming file and dataset and the previous one is tried. nullopt when the
//           directory holds no checkpoint; CheckpointError when it holds some and none is valid
//           (a run never silently restarts from scratch over damaged checkpoints);
//   a path (a checkpoint file, or a directory meaning its newest valid checkpoint): that one, a
//           CheckpointError when it is not valid.
std::optional<ResumePoint> resume_checkpoint(const Config& cfg, const std::vector<RankShard>& shards, MPI_Comm comm);
inline std::optional<ResumePoint> resume_checkpoint(const Config& cfg, RankShard& shard, MPI_Comm comm) {
  return resume_checkpoint(cfg, std::vector<RankShard>{shard}, comm);
}

// ---- serial functions (one rank; the `trident ckpt` tools) ----

// Reads and validates the structure of a checkpoint (format, version, required attributes and
// groups, dataset shapes consistent with the model recorded, data within the file). No checksums.
CheckpointHeader read_checkpoint_header(const std::string& path);

// Complete checkpoints (step_N.h5, not .tmp) in dir, newest (highest step) first.
std::vector<std::string> list_checkpoints(const std::string& dir);
// The file DIR/latest names ("" when there is no `latest`). `latest` is read with a bound and may
// only name a checkpoint file of DIR itself (step_N.h5): a special file, a path elsewhere ("../x",
// "/elsewhere/step_1.h5") or binary content throws CheckpointError saying why.
std::string latest_checkpoint(const std::string& dir);
// Whether `dir` can be checkpoint.dir, creating nothing: an existing directory this process can write,
// whose `latest` (if any) is a regular file and whose lock (directory_lock.hpp) no live run holds; or a
// path whose nearest existing ancestor is a writable directory. Throws trident::Error saying why not.
// `train` (before taking the lock) and `check` call it alike.
void check_checkpoint_dir(const std::string& dir);
// A checkpoint file as given, or for a directory its `latest` (or, without one, its newest).
std::string resolve_checkpoint(const std::string& file_or_dir);

// The checkpoint checkpoint.resume designates, by structure alone (no checksums): "" for "never",
// or "auto" with no checkpoint; the newest structurally valid one for "auto" (passed-over ones are
// appended to `skipped` with their reasons); the path itself for a path (CheckpointError if invalid).
std::string find_resume_checkpoint(const CheckpointConfig& cfg, std::vector<std::string>* skipped = nullptr);

// Re-reads every dataset (and the deck) and recomputes its checksum.
struct DatasetVerdict {
  std::string dataset;
  bool ok = false;
  uint64_t expected = 0, actual = 0;
  std::string error;  // a read error instead of a mismatch
};
std::vector<DatasetVerdict> verify_checkpoint(const std::string& path);

// Writes out_dir/model.safetensors (Hugging Face GPT-2 names and layout; F32, or BF16 with `bf16`, the
// fp32 values rounded to nearest even) and out_dir/config.json (GPT2LMHeadModel, torch_dtype float32 or
// bfloat16) from checkpoint `ckpt` (a file, or a directory meaning its latest), and the files
// of the run's tokenizer (data.tokenizer of the checkpoint's deck; text/hf_tokenizer_files.hpp).
struct ExportResult {
  std::string checkpoint;          // the checkpoint file exported
  Tokenizer tokenizer;             // the run's
  std::vector<std::string> files;  // written into out_dir
};
ExportResult export_checkpoint(const std::string& ckpt, const std::string& out_dir, bool bf16 = false);

// The Hugging Face config.json of a trident model (bos/eos ids for GPT-2's tokenizer; torch_dtype
// bfloat16 with `bf16`, else float32).
std::string hf_config_json(const ModelConfig& m, Tokenizer tokenizer, bool bf16 = false);

// data.tokenizer of a checkpoint's resolved deck; for a deck written before the key, its default.
Tokenizer checkpoint_tokenizer(const CheckpointHeader& h);

// Human-readable summary (`trident ckpt inspect`).
std::string describe_checkpoint(const CheckpointHeader& h, bool with_deck);

// ---- when to write ----

// Asks for a checkpoint at the end of the current step (e.g. from a SIGUSR1/SIGTERM handler of the
// Slurm integration). Async-signal-safe: it only increments a volatile sig_atomic_t.
void request_checkpoint() noexcept;

// Decides after each step whether to checkpoint: every `every_steps` steps, when `every_minutes`
// have passed since the last checkpoint (or the start), at the last step, or on request. The
// decision is collective and the same on every rank: rank 0's clock decides the time criterion, and
// a request on any rank counts.
class CheckpointSchedule {
 public:
  // last_step: the final step of the run (train.steps). The clock starts now.
  CheckpointSchedule(const CheckpointConfig& cfg, int64_t last_step, MPI_Comm comm);

  struct Decision {
    bool write = false;
    std::string reason;  // "every 100 steps", "30 minutes", "end of training", "requested"
  };
  // Collective (one small all-reduce). A true decision restarts the clock and consumes requests.
  Decision should_write(int64_t step);
  bool enabled() const { return enabled_; }

 private:
  CheckpointConfig cfg_;
  int64_t last_step_;
  MPI_Comm comm_;
  bool enabled_;
  double last_time_ = 0;
  long handled_requests_ = 0;
};

}  // namespace trident
