// BLAS start-up tuning (core/blas_runtime.hpp), checked against what /proc/cpuinfo says about this CPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <cstdlib>
#include <set>
#include <sstream>
#include <string>

#include "core/blas_runtime.hpp"

namespace {

// The CPU's feature flags, read from /proc/cpuinfo (independently of the compiler's cpu-detection
// builtins that the tuning uses).
std::set<std::string> cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}

TEST(BlasRuntime, AnAvx2CpuGetsAvx2OrBetterKernels) {
  const std::set<std::string> flags = cpu_flags();
  ASSERT_FALSE(flags.empty()) << "no flags line in /proc/cpuinfo";
  const char* tune = std::getenv("TRIDENT_BLAS_TUNE");
  ASSERT_FALSE(tune && std::string(tune) == "0") << "run this test without TRIDENT_BLAS_TUNE=0";
  const std::string core = trident::blas_core_name();
  EXPECT_NE(core, "Prescott") << "the SSE3 fallback that the tuning exists to avoid";
  // OpenBLAS 0.3.21's x86-64 families with AVX2 FMA kernels (Zen uses Haswell's).
  const std::set<std::string> avx2_or_better = {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"};
  if (flags.count("avx2") && flags.count("fma")) {
    EXPECT_TRUE(avx2_or_better.count(core)) << "CPU has AVX2+FMA but OpenBLAS runs the " << core << " kernels";
  }
}

// The re-exec keeps the program's name: ps, top and pgrep see "test_blas_runti" (comm is 15 characters),
// not "exe" from /proc/self/exe.
TEST(BlasRuntime, ReexecutionKeepsTheProcessName) {
  std::ifstream in("/proc/self/comm");
  std::string comm;
  std::getline(in, comm);
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe").filename().string();
  EXPECT_EQ(comm, exe.substr(0, 15));
}

}  // namespace
