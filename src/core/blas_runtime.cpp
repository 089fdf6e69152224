#include "core/blas_runtime.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>

extern "C" char* openblas_get_corename(void);

namespace trident {

std::string blas_core_name() { return openblas_get_corename(); }

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// The kernel family to ask for, or nullptr when OpenBLAS's own choice should stand.
const char* better_core_type() {
  // "prescott" is what DYNAMIC_ARCH picks for an x86-64 CPU it does not recognise.
  if (lower(blas_core_name()) != "prescott") return nullptr;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  if (__builtin_cpu_supports("avx")) return "SandyBridge";
#endif
  return nullptr;
}

}  // namespace

void tune_blas_for_this_cpu(int /*argc*/, char** argv) {
  const char* opt = std::getenv("TRIDENT_BLAS_TUNE");
  if (std::getenv("OPENBLAS_CORETYPE") || (opt && std::string(opt) == "0")) return;
  const char* core = better_core_type();
  if (!core) return;
  setenv("OPENBLAS_CORETYPE", core, 1);
  // The executable's real path, not /proc/self/exe: the process name (ps, top, pgrep) comes from it.
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) return;
  // A signal arriving between the exec and the new image's handlers would find the default action
  // (SIGUSR1, SIGTERM, SIGINT: death). Blocked signals stay pending across execv; main unblocks them once its
  // handlers are back.
  sigset_t stop_signals, previous;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGUSR1);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigprocmask(SIG_BLOCK, &stop_signals, &previous);
  execv(self.c_str(), argv);  // only returns on failure: then run on with the slow kernels
  sigprocmask(SIG_SETMASK, &previous, nullptr);
}

}  // namespace trident
