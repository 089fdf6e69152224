#pragma once
// Per-step figures: the log line every log_every steps and the JSON-lines metrics file.
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>

namespace trident {

// Memory of one rank by what holds it, in bytes.
struct MemoryAccount {
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer = 0;     // AdamW moments of this rank's ZeRO range
  int64_t activations = 0;   // saved for backward at the peak of micro-batches in flight, plus scratch
  int64_t comm_buffers = 0;  // pipeline boundary buffers (DP reductions work in place)
  int64_t total() const { return parameters + gradients + optimizer + activations + comm_buffers; }
};
std::string describe(const MemoryAccount& m);  // "parameters 94.6 MiB | gradients ... | total ..."

struct StepMetrics {
  int64_t step = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double step_ms = 0;
  double tokens_per_s = 0;
  double tflops = 0;             // achieved model TFLOP/s per rank
  double mfu = 0;                // tflops / peak
  double memory_gib = 0;         // peak resident memory of this process
  double backend_memory_gib = 0; // peak backend memory (device memory on a GPU) allocated so far
  double eta_s = 0;              // estimated time to the last step
  double dp_wait_ms = 0;         // DP reduction time not hidden behind backward
  MemoryAccount memory;
  std::optional<double> val_loss;
};

// Appends one JSON object per step to a file (created fresh unless `append`).
class MetricsWriter {
 public:
  MetricsWriter(const std::string& path, bool append);
  void write(const StepMetrics& m);

 private:
  std::string path_;
  std::ofstream out_;
};

// Checks at start-up that an output file can be written later: its parent directory exists or can be
// created, and the path is not a directory nor an unwritable file. Throws trident::Error naming the
// deck key (`what`, e.g. "[runtime] metrics") and the reason. Creates the parent directories only.
void check_output_path(const std::string& what, const std::string& path);

std::string format_log_line(const StepMetrics& m, int64_t total_steps);

// Peak resident set size of this process (VmHWM), in bytes; 0 when unknown.
int64_t peak_rss_bytes();

}  // namespace trident
