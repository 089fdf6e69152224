#include "train/metrics.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "core/regular_file.hpp"

namespace trident {

void check_output_path(const std::string& what, const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path parent = fs::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) fs::create_directories(parent, ec);
  if (ec || (!parent.empty() && !fs::is_directory(parent)))
    throw Error(fmt::format("{} = \"{}\": cannot create the directory {}: {}", what, path, parent.string(),
                            ec ? ec.message() : "a file of that name exists"));
  const fs::path dir = parent.empty() ? fs::path(".") : parent;
  if (fs::is_directory(path)) throw Error(fmt::format("{} = \"{}\" is a directory, not a file", what, path));
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw Error(fmt::format("{} = \"{}\" is {}, not a regular file", what, path, file_type_name(st.st_mode)));
  const bool exists = fs::exists(path, ec);
  if (::access(exists ? path.c_str() : dir.c_str(), W_OK) != 0)
    throw Error(fmt::format("{} = \"{}\": {} is not writable ({})", what, path, exists ? path : dir.string(),
                            std::strerror(errno)));
}

namespace {

RecordFile open_metrics_file(const std::string& path, bool append) {
  check_output_path("[runtime] metrics", path);  // creates the parent directories
  return RecordFile("[runtime] metrics", path, append);
}

}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, bool append, RunIdentity run)
    : file_(open_metrics_file(path, append)), run_(std::move(run)) {}

void MetricsWriter::write_record(nlohmann::json& j) {
  j["time"] = wall_clock_s();
  j["run"] = run_.run_id;
  j["restart"] = run_.restart;
  file_.append(j.dump() + "\n");
}

void MetricsWriter::write_resume(int64_t resumed_step) {
  nlohmann::json j = {{"event", "resume"}, {"step", resumed_step}};
  write_record(j);
}

void MetricsWriter::write(const StepMetrics& m) {
  nlohmann::json j = {{"step", m.step},          {"loss", m.loss},       {"lr", m.lr},
                      {"grad_norm", m.grad_norm}, {"step_ms", m.step_ms}, {"tokens_per_s", m.tokens_per_s},
                      {"tflops", m.tflops},       {"mfu", m.mfu},         {"memory_gib", m.memory_gib},
                      {"backend_memory_gib", m.backend_memory_gib}, {"eta_s", m.eta_s}};
  if (m.val_loss) j["val_loss"] = *m.val_loss;
  if (m.sample) j["sample"] = *m.sample;
  j["dp_wait_ms"] = m.dp_wait_ms;
  j["peak_tflops"] = m.peak_tflops;
  j["peak_source"] = m.peak_source;
  const MemoryAccount& a = m.memory;
  j["memory_bytes"] = {{"parameters", a.parameters}, {"gradients", a.gradients}, {"optimizer", a.optimizer},
                       {"activations", a.activations}, {"buffers", a.buffers},     {"runtime", a.runtime()},
                       {"peak_rss", a.peak_rss},       {"total", a.total()}};
  write_record(j);
}

std::string format_log_line(const StepMetrics& m, int64_t total_steps) {
  std::string line = fmt::format(
      "step {:>{}}/{} | loss {:.4f} | lr {:.3e} | norm {:.3f} | {:.1f} ms | {:.0f} tok/s | {:.3f} TFLOP/s | "
      "MFU {:.1f}% | mem {:.2f} GiB (backend {:.2f} GiB) | ETA {:.0f} s",
      m.step, std::to_string(total_steps).size(), total_steps, m.loss, m.lr, m.grad_norm, m.step_ms, m.tokens_per_s,
      m.tflops, 100 * m.mfu, m.memory_gib, m.backend_memory_gib, m.eta_s);
  if (m.val_loss) line += fmt::format(" | val {:.4f}", *m.val_loss);
  return line;
}

std::string describe(const MemoryAccount& m) {
  const auto mib = [](int64_t b) { return double(b) / 1048576.0; };
  std::string s = fmt::format("parameters {:.1f} MiB | gradients {:.1f} MiB | optimizer state {:.1f} MiB | activations "
                              "{:.1f} MiB | buffers {:.1f} MiB",
                              mib(m.parameters), mib(m.gradients), mib(m.optimizer), mib(m.activations), mib(m.buffers));
  if (m.peak_rss > 0)
    s += fmt::format(" | runtime {:.1f} MiB | peak RSS {:.1f} MiB", mib(m.runtime()), mib(m.peak_rss));
  else
    s += fmt::format(" | total {:.1f} MiB", mib(m.allocated()));
  return s;
}

int64_t peak_rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string key;
  while (f >> key) {
    if (key == "VmHWM:") {
      int64_t kib = 0;
      f >> kib;
      return kib * 1024;
    }
    f.ignore(1 << 20, '\n');
  }
  return 0;
}

}  // namespace trident
