#pragma once
// The throughput reference for MFU, and where it came from. On the CPU the reference is a measured
// sgemm rate, which a short measurement at every start made move between identical runs (MFU 49% in
// one, 87% in the next); so it is measured once per machine kind and BLAS set-up, with repetitions,
// and kept in a small file under $XDG_CACHE_HOME/trident (or ~/.cache/trident), keyed by the CPU
// model, the BLAS kernel family (OPENBLAS_CORETYPE's effect) and the BLAS thread count. A cache file
// that cannot be read or does not parse is ignored with a warning and written again.
#include <functional>
#include <optional>
#include <string>

#include "core/config.hpp"

namespace trident {

class Group;
class Kernels;

struct PeakThroughput {
  double tflops = 0;   // per rank
  std::string source;  // for the log and the metrics: "runtime.peak_tflops", "measured now ...", "cached in
                       // PATH ...", "H100 SXM dense bf16 peak from NVIDIA's data sheet ...", "clock-derived ..."
};

// Repetitions of the backend's sgemm measurement (about 0.1 s each); the best one is the peak.
inline constexpr int kPeakMeasurements = 10;

// "CPU MODEL | BLAS KERNELS kernels | N BLAS thread(s)" for this process.
std::string cpu_peak_cache_key();

// The cache file for `key` under the cache directory; empty when there is none (no XDG_CACHE_HOME,
// no HOME).
std::string cpu_peak_cache_path(const std::string& key);

// The figure cached for `key` in `path`. Empty when there is no such file; empty with *problem set
// when the file is unreadable, malformed, for another key, or holds no positive finite figure.
std::optional<double> read_cpu_peak(const std::string& path, const std::string& key, std::string* problem);

// Writes the figure atomically (beside the name, then renamed), creating the directory. Throws
// OutputError.
void write_cpu_peak(const std::string& path, const std::string& key, double tflops);

// A GPU's reference: the data-sheet figure of its product when train/gpu_peaks.hpp names `device_name`
// (source "H100 SXM dense bf16 peak from NVIDIA's data sheet, ..."), else `clock_derived()` (source
// "clock-derived, device not in the table: ...").
PeakThroughput gpu_peak_throughput(const std::string& device_name, const std::function<double()>& clock_derived);

// The warning for a run computing `tflops` per rank, more than its reference (MFU above 100%): such a
// reference is wrong (a CPU peak measured while the machine was busy, a device clocked above the table's
// figure), and the warning says where it came from and how to replace it. Empty when tflops <= the reference.
std::string mfu_above_peak_warning(double tflops, const PeakThroughput& peak);

// runtime.peak_tflops when set; a GPU's figure (gpu_peak_throughput); else the cached CPU figure, or one
// measured now and cached. Collective over `world` when given (rank 0 reads, measures and writes; the
// others take its figure), so every rank reports MFU against the same reference.
PeakThroughput resolve_peak_throughput(const Config& cfg, Kernels& kernels, Group* world);

}  // namespace trident
