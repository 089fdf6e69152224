// gpu-sim's settings, read once from the environment (gpusim/README.md, "Settings").
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "state.hpp"

namespace gpusim {
namespace {

[[noreturn]] void bad_setting(const char* name, const char* value, const char* allowed) {
  std::fprintf(stderr, "gpu-sim: %s=%s is not valid (%s)\n", name, value, allowed);
  std::exit(2);
}

long integer(const char* name, long fallback, long lo, long hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < lo || x > hi)
    bad_setting(name, v, ("an integer in " + std::to_string(lo) + ".." + std::to_string(hi)).c_str());
  return x;
}

Config read() {
  Config c;
  c.gpus_per_node = int(integer("GPUSIM_GPUS_PER_NODE", 8, 0, 64));
  c.memory_bytes = size_t(integer("GPUSIM_MEMORY_MB", 0, 0, 1 << 24)) << 20;
  c.stream_lag_s = double(integer("GPUSIM_STREAM_LAG_US", 0, 0, 10000000)) * 1e-6;
#if defined(__SANITIZE_ADDRESS__)
  const long default_stack_kb = 512;  // instrumented frames are several times larger
#else
  const long default_stack_kb = 128;
#endif
  c.fiber_stack_bytes = size_t(integer("GPUSIM_FIBER_STACK_KB", default_stack_kb, 16, 65536)) << 10;
  c.profile = integer("GPUSIM_PROFILE", 0, 0, 1) == 1;
  if (const char* v = std::getenv("GPUSIM_THREAD_ORDER"); v && *v) {
    if (std::strcmp(v, "reverse") == 0)
      c.reverse_threads = true;
    else if (std::strcmp(v, "forward") != 0)
      bad_setting("GPUSIM_THREAD_ORDER", v, "forward or reverse");
  }
  if (const char* v = std::getenv("GPUSIM_BLOCK_ORDER"); v && *v) {
    if (std::strcmp(v, "forward") == 0)
      c.block_order = Config::BlockOrder::Forward;
    else if (std::strcmp(v, "reverse") == 0)
      c.block_order = Config::BlockOrder::Reverse;
    else if (std::strcmp(v, "shuffle") != 0)
      bad_setting("GPUSIM_BLOCK_ORDER", v, "shuffle, forward or reverse");
  }
  return c;
}

}  // namespace

const Config& config() {
  static const Config c = read();
  return c;
}

}  // namespace gpusim
