// Kernel launches: the configuration checks a GPU makes at launch (returned, and recorded as the
// thread's last error), per-function attributes, and the grid's execution on the stream's worker:
// blocks one after another in a shuffled order (a kernel whose result depends on the order of its
// blocks shows it), each by the block runner. A fault ends the grid and becomes the device's sticky
// error, with a message naming the kernel, the block and the thread.
#include <backtrace.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <string>

#include "block_runner.hpp"
#include "cuda_runtime.h"
#include "gpusim/runtime.hpp"
#include "state.hpp"

namespace gpusim {
namespace {

constexpr size_t kDefaultDynamicShared = 48 << 10;

struct FunctionAttributes {
  int max_dynamic_shared = int(kDefaultDynamicShared);
};

std::mutex g_functions_lock;
std::map<const void*, FunctionAttributes>& functions() {
  static auto* f = new std::map<const void*, FunctionAttributes>;
  return *f;
}

FunctionAttributes attributes_of(const void* fn) {
  std::lock_guard lock(g_functions_lock);
  auto it = functions().find(fn);
  return it == functions().end() ? FunctionAttributes{} : it->second;
}

// The kernel's (demangled) name from the executable's symbol table, for messages.
std::string function_name(const void* fn) {
  static backtrace_state* state = backtrace_create_state(nullptr, 1, [](void*, const char*, int) {}, nullptr);
  std::string name;
  if (state) {
    backtrace_syminfo(
        state, reinterpret_cast<uintptr_t>(fn),
        [](void* out, uintptr_t, const char* symbol, uintptr_t, uintptr_t) {
          if (symbol) *static_cast<std::string*>(out) = symbol;
        },
        [](void*, const char*, int) {}, &name);
  }
  if (name.empty()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "kernel at %p", fn);
    return buf;
  }
  int status = 0;
  char* demangled = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  if (status == 0 && demangled) name = demangled;
  std::free(demangled);
  return name;
}

cudaError_t check_configuration(const KernelLaunch& l, const cudaDeviceProp& p) {
  const dim3 b = l.block, g = l.grid;
  if (b.x == 0 || b.y == 0 || b.z == 0 || g.x == 0 || g.y == 0 || g.z == 0) return cudaErrorInvalidConfiguration;
  if (b.x > unsigned(p.maxThreadsDim[0]) || b.y > unsigned(p.maxThreadsDim[1]) || b.z > unsigned(p.maxThreadsDim[2]))
    return cudaErrorInvalidConfiguration;
  if (uint64_t(b.x) * b.y * b.z > uint64_t(p.maxThreadsPerBlock)) return cudaErrorInvalidConfiguration;
  if (g.x > unsigned(p.maxGridSize[0]) || g.y > unsigned(p.maxGridSize[1]) || g.z > unsigned(p.maxGridSize[2]))
    return cudaErrorInvalidConfiguration;
  if (l.dynamic_shared_bytes > size_t(attributes_of(l.function).max_dynamic_shared)) return cudaErrorInvalidValue;
  if (!l.run_thread) return cudaErrorInvalidDeviceFunction;
  return cudaSuccess;
}

std::vector<uint64_t> block_order(uint64_t blocks) {
  std::vector<uint64_t> order(blocks);
  std::iota(order.begin(), order.end(), uint64_t(0));
  static std::atomic<uint64_t> launches{0};
  switch (config().block_order) {
    case Config::BlockOrder::Forward: break;
    case Config::BlockOrder::Reverse: std::reverse(order.begin(), order.end()); break;
    case Config::BlockOrder::Shuffle: std::shuffle(order.begin(), order.end(), std::mt19937_64(++launches)); break;
  }
  return order;
}

// GPUSIM_PROFILE: time spent in each kernel, printed at exit (where the simulator's time goes).
struct KernelTime {
  uint64_t launches = 0, threads = 0;
  double seconds = 0;
};
std::mutex g_profile_lock;
std::map<const void*, KernelTime>* g_profile = nullptr;

void print_profile() {
  std::lock_guard lock(g_profile_lock);
  std::vector<std::pair<const void*, KernelTime>> rows(g_profile->begin(), g_profile->end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  std::fprintf(stderr, "gpu-sim profile: seconds, launches, threads (millions), kernel\n");
  for (const auto& [fn, t] : rows)
    std::fprintf(stderr, "  %8.3f %8llu %10.3f  %s\n", t.seconds, (unsigned long long)t.launches, double(t.threads) * 1e-6,
                 function_name(fn).c_str());
}

void record_profile(const KernelLaunch& l, double seconds) {
  std::lock_guard lock(g_profile_lock);
  if (!g_profile) {
    g_profile = new std::map<const void*, KernelTime>;
    std::atexit(print_profile);
  }
  KernelTime& t = (*g_profile)[l.function];
  ++t.launches;
  t.threads += uint64_t(l.grid.x) * l.grid.y * l.grid.z * l.block.x * l.block.y * l.block.z;
  t.seconds += seconds;
}

void run_blocks(const KernelLaunch& l);

void run_grid(const KernelLaunch& l) {
  if (!config().profile) return run_blocks(l);
  const double start = now_s();
  run_blocks(l);
  record_profile(l, now_s() - start);
}

void run_blocks(const KernelLaunch& l) {
  for (size_t i = 0; i < l.pointers.size(); ++i) {
    const void* p = l.pointers[i];
    if (p && !device_accessible(p, 0)) {
      char where[64];
      std::snprintf(where, sizeof where, "%p", p);
      device_fault(cudaErrorIllegalAddress, function_name(l.function) + ": pointer argument " + std::to_string(i + 1) +
                                                " (" + where + ") is not device memory nor page-locked host memory");
      return;
    }
  }
  // Dynamic shared memory starts 128-byte aligned, as on a GPU (WMMA tiles there need 32 bytes).
  constexpr size_t kSharedAlignment = 128;
  thread_local std::vector<unsigned char> shared_storage;
  shared_storage.resize(l.dynamic_shared_bytes + kSharedAlignment);
  const uintptr_t base = reinterpret_cast<uintptr_t>(shared_storage.data());
  unsigned char* const dynamic_shared =
      shared_storage.data() + ((kSharedAlignment - base % kSharedAlignment) % kSharedAlignment);
  const dim3 g = l.grid;
  for (uint64_t k : block_order(uint64_t(g.x) * g.y * g.z)) {
    const uint3 index{unsigned(k % g.x), unsigned((k / g.x) % g.y), unsigned(k / (uint64_t(g.x) * g.y))};
    std::fill(dynamic_shared, dynamic_shared + l.dynamic_shared_bytes, 0xFF);  // never written: reads as NaN
    if (auto fault = run_block(l, index, dynamic_shared)) {
      device_fault(fault->error, function_name(l.function) + ", block (" + std::to_string(index.x) + "," +
                                     std::to_string(index.y) + "," + std::to_string(index.z) + "), " + fault->message);
      return;
    }
  }
}

}  // namespace

cudaError_t launch(KernelLaunch l) {
  Stream* s = resolve(l.stream);
  if (!s) return record_error(current_device() ? cudaErrorInvalidResourceHandle : cudaErrorNoDevice);
  if (s->device->sticky) return record_error(cudaError_t(s->device->sticky.load()));
  if (cudaError_t e = check_configuration(l, s->device->prop); e != cudaSuccess) return record_error(e);
  auto shared = std::make_shared<const KernelLaunch>(std::move(l));
  return enqueue(reinterpret_cast<cudaStream_t>(s), "kernel", [shared] { run_grid(*shared); });
}

void device_fault(cudaError_t error, const std::string& message) {
  Device* d = device_of_worker();
  if (!d) d = current_device();
  if (!d) return;
  int expected = cudaSuccess;
  if (d->sticky.compare_exchange_strong(expected, error))
    std::fprintf(stderr, "gpu-sim: device %d faulted (%s) in %s: %s\n", d->ordinal, cudaGetErrorName(error),
                 work_name()[0] ? work_name() : "host call", message.c_str());
}

}  // namespace gpusim

extern "C" {

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  gpusim::Device* d = gpusim::current_device();
  if (!func) return gpusim::record_error(cudaErrorInvalidDeviceFunction);
  if (!d) return gpusim::record_error(cudaErrorNoDevice);
  std::lock_guard lock(gpusim::g_functions_lock);
  switch (attr) {
    case cudaFuncAttributeMaxDynamicSharedMemorySize:
      if (value < 0 || size_t(value) > d->prop.sharedMemPerBlockOptin) return gpusim::record_error(cudaErrorInvalidValue);
      gpusim::functions()[func].max_dynamic_shared = value;
      return cudaSuccess;
    case cudaFuncAttributePreferredSharedMemoryCarveout:
      return (value >= -1 && value <= 100) ? cudaSuccess : gpusim::record_error(cudaErrorInvalidValue);
  }
  return gpusim::record_error(cudaErrorInvalidValue);
}

cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func) {
  if (!attr) return gpusim::record_error(cudaErrorInvalidValue);
  if (!func) return gpusim::record_error(cudaErrorInvalidDeviceFunction);
  *attr = cudaFuncAttributes{};
  attr->maxThreadsPerBlock = 1024;
  attr->maxDynamicSharedSizeBytes = gpusim::attributes_of(func).max_dynamic_shared;
  attr->ptxVersion = attr->binaryVersion = 90;
  return cudaSuccess;
}

}  // extern "C"
