#include "train/peak_throughput.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <toml++/toml.h>

#include "comm/group.hpp"
#include "core/blas_runtime.hpp"
#include "core/log.hpp"
#include "core/output_file.hpp"
#include "core/regular_file.hpp"
#include "core/splitmix64.hpp"
#include "core/utc_time.hpp"
#include "kernels.hpp"
#include "train/gpu_peaks.hpp"

extern "C" int openblas_get_num_threads(void);

namespace trident {
namespace {

constexpr const char* kFormat = "trident cpu peak v1";

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos || line.rfind("model name", 0) != 0) continue;
    std::string v = line.substr(colon + 1);
    v.erase(0, v.find_first_not_of(" \t"));
    return v;
  }
  return "unknown CPU";
}

std::string cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && xdg[0] == '/') return std::string(xdg) + "/trident";  // the XDG spec ignores relative paths
  const char* home = std::getenv("HOME");
  if (home && home[0] == '/') return std::string(home) + "/.cache/trident";
  return "";
}

double measure(Kernels& k) {
  double best = 0;
  for (int i = 0; i < kPeakMeasurements; ++i) best = std::max(best, k.peak_tflops());
  return best;
}

// Rank 0's figure and its source (only rank 0 logs).
PeakThroughput cpu_peak_on_this_rank(Kernels& k) {
  const std::string key = cpu_peak_cache_key();
  const std::string path = cpu_peak_cache_path(key);
  if (path.empty())
    return {measure(k), fmt::format("measured now, best of {} sgemm runs ({}); not cached: neither XDG_CACHE_HOME "
                                    "nor HOME is set",
                                    kPeakMeasurements, key)};
  std::string problem;
  if (const auto cached = read_cpu_peak(path, key, &problem))
    return {*cached, fmt::format("cached in {} for {}; delete the file to measure again", path, key)};
  if (!problem.empty()) log::warn("ignoring the cached CPU peak {}: {}; measuring it again", path, problem);
  PeakThroughput p{measure(k), ""};
  try {
    write_cpu_peak(path, key, p.tflops);
    p.source = fmt::format("measured now, best of {} sgemm runs ({}); cached in {}", kPeakMeasurements, key, path);
  } catch (const Error& e) {
    p.source = fmt::format("measured now, best of {} sgemm runs ({}); not cached: {}", kPeakMeasurements, key,
                           e.what());
  }
  return p;
}

}  // namespace

std::string cpu_peak_cache_key() {
  const int threads = openblas_get_num_threads();
  return fmt::format("{} | {} kernels | {} BLAS thread{}", cpu_model(), blas_core_name(), threads,
                     threads == 1 ? "" : "s");
}

std::string cpu_peak_cache_path(const std::string& key) {
  const std::string dir = cache_dir();
  return dir.empty() ? "" : fmt::format("{}/cpu-peak-{:016x}.toml", dir, fnv1a(key));
}

std::optional<double> read_cpu_peak(const std::string& path, const std::string& key, std::string* problem) {
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::symlink_status(path, ec))) return std::nullopt;
  try {
    const toml::table t = toml::parse(read_small_file(path, 4096), path);
    if (t["format"].value_or(std::string()) != kFormat) {
      *problem = fmt::format("not a \"{}\" file", kFormat);
      return std::nullopt;
    }
    if (t["key"].value_or(std::string()) != key) {
      *problem = fmt::format("it is for \"{}\", not \"{}\"", t["key"].value_or(std::string("?")), key);
      return std::nullopt;
    }
    const double tflops = t["tflops"].value_or(0.0);
    if (!std::isfinite(tflops) || tflops <= 0) {
      *problem = "no positive tflops figure";
      return std::nullopt;
    }
    return tflops;
  } catch (const toml::parse_error& e) {
    *problem = fmt::format("{} (line {})", e.description(), e.source().begin.line);
  } catch (const Error& e) {
    *problem = e.what();
  }
  return std::nullopt;
}

void write_cpu_peak(const std::string& path, const std::string& key, double tflops) {
  const auto dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw OutputError("the CPU peak cache", dir.string(), ec.value(), "cannot create");
  const toml::table t{{"format", kFormat}, {"key", key}, {"tflops", tflops}, {"measured", utc_timestamp()}};
  std::ostringstream text;
  text << "# trident's measured sgemm peak for MFU (runtime.peak_tflops overrides it)\n" << t << "\n";
  // Ranks of other jobs may write the same file at the same moment: each writes its own name, then
  // renames it into place.
  const std::string own = fmt::format("{}.{}", path, getpid());
  write_file_atomically("the CPU peak cache", own, text.str());
  std::filesystem::rename(own, path, ec);
  if (ec) {
    const int err = ec.value();
    std::filesystem::remove(own, ec);
    throw OutputError("the CPU peak cache", path, err, "cannot rename into place");
  }
}

PeakThroughput gpu_peak_throughput(const std::string& device_name, const std::function<double()>& clock_derived) {
  if (const auto p = find_gpu_peak(device_name))
    return {p->bf16_dense_tflops, fmt::format("{} dense bf16 peak from NVIDIA's data sheet, for device \"{}\"",
                                              p->product, p->device_name)};
  return {clock_derived(), fmt::format("clock-derived, device not in the table: \"{}\"; SMs x peak clock x bf16 "
                                       "FLOP/clock/SM (set runtime.peak_tflops to use another figure)",
                                       device_name)};
}

std::string mfu_above_peak_warning(double tflops, const PeakThroughput& peak) {
  if (!(tflops > peak.tflops)) return "";
  return fmt::format("MFU {:.0f}%: this run computes {:.3f} TFLOP/s per rank, more than its throughput reference of "
                     "{:.3f} ({}), so that reference is too low and this run's MFU figures overstate; set "
                     "runtime.peak_tflops{}",
                     100 * tflops / peak.tflops, tflops, peak.tflops, peak.source,
                     peak.source.find("cached in") != std::string::npos
                         ? ", or delete the cache file to measure again on an idle machine"
                         : "");
}

PeakThroughput resolve_peak_throughput(const Config& cfg, Kernels& k, Group* world) {
  if (cfg.runtime.peak_tflops > 0) return {cfg.runtime.peak_tflops, "runtime.peak_tflops"};
  if (cfg.runtime.backend != Backend::Cpu) return gpu_peak_throughput(k.device_name(), [&] { return k.peak_tflops(); });
  PeakThroughput p;
  if (!world || world->rank() == 0) p = cpu_peak_on_this_rank(k);
  if (world && world->size() > 1) {
    world->broadcast_host(&p.tflops, 1, 0);
    if (world->rank() != 0) p.source = "world rank 0's figure";
  }
  return p;
}

}  // namespace trident
