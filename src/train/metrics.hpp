#pragma once
// Per-step figures: the log line every log_every steps and the JSON-lines metrics file.
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "core/output_file.hpp"
#include "core/slurm_env.hpp"

namespace trident {

// Memory of one rank by what holds it, in bytes: the categories of `trident plan` (src/planner/
// memory_model.hpp). The first five are what the compute backend allocated; `runtime` is the rest of
// the measured peak resident set (code, libraries, MPI, the allocator's slack, mapped data pages).
struct MemoryAccount {
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer = 0;     // AdamW moments of this rank's ZeRO range
  int64_t activations = 0;   // saved for backward at the peak of micro-batches in flight, plus scratch
  int64_t buffers = 0;       // every other backend allocation: pipeline boundary buffers, tokens, reductions
  int64_t peak_rss = 0;      // measured peak resident set of the process (VmHWM); 0 when unknown
  int64_t allocated() const { return parameters + gradients + optimizer + activations + buffers; }
  int64_t runtime() const { return peak_rss > allocated() ? peak_rss - allocated() : 0; }
  int64_t total() const { return allocated() + runtime(); }
};
std::string describe(const MemoryAccount& m);  // "parameters 94.6 MiB | gradients ... | peak RSS ..."

struct StepMetrics {
  int64_t step = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double step_ms = 0;
  double tokens_per_s = 0;
  double tflops = 0;             // achieved model TFLOP/s per rank
  double mfu = 0;                // tflops / peak
  double peak_tflops = 0;        // MFU's reference per rank, and where it came from (train/peak_throughput.hpp)
  std::string peak_source;
  double memory_gib = 0;         // peak resident memory of this process
  double backend_memory_gib = 0; // peak backend memory (device memory on a GPU) allocated so far
  double eta_s = 0;              // estimated time to the last step
  double dp_wait_ms = 0;         // DP reduction time not hidden behind backward
  MemoryAccount memory;
  std::optional<double> val_loss;
  std::optional<std::string> sample;  // train.sample_every
};

// Appends one JSON object per step to a file (created fresh unless `append`). Every record carries
// "time" (Unix seconds), "run" (the run id) and "restart" (the restart count), so that the lines of
// a run that was stopped and resumed can be told apart; a resumed run first writes a record
// {"event": "resume", "step": S, ...} (S: the step the checkpoint completed).
// A record is written whole or not at all; a failure throws OutputError (core/output_file.hpp), which
// the trainer turns into a stop with a final checkpoint.
class MetricsWriter {
 public:
  MetricsWriter(const std::string& path, bool append, RunIdentity run);
  void write(const StepMetrics& m);
  void write_resume(int64_t resumed_step);

 private:
  void write_record(nlohmann::json& j);
  RecordFile file_;
  RunIdentity run_;
};

// Checks at start-up that an output file can be written later: its parent directory exists or can be
// created, and the path is not a directory, a special file (FIFO, device) nor an unwritable file. Throws trident::Error naming the
// deck key (`what`, e.g. "[runtime] metrics") and the reason. Creates the parent directories only.
void check_output_path(const std::string& what, const std::string& path);

std::string format_log_line(const StepMetrics& m, int64_t total_steps);

// Peak resident set size of this process (VmHWM), in bytes; 0 when unknown.
int64_t peak_rss_bytes();

}  // namespace trident
