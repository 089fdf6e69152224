#include "cuda_module.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>

#include "backend.hpp"
#include "core/error.hpp"

namespace trident {
namespace {

// The module's file name (OUTPUT_NAME of trident_cuda_module in cmake/TridentCuda.cmake) and the
// function it exports (kernels/cuda/module.cpp).
constexpr const char* kModuleFile = "libtrident_cuda.so";
constexpr const char* kEntryPoint = "trident_cuda_module";

std::atomic<CudaModule*>& current() {
  static std::atomic<CudaModule*> module{nullptr};
  return module;
}

std::string module_path() {
  if (const char* path = std::getenv("TRIDENT_CUDA_MODULE"); path && *path) return path;
  std::error_code error;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error)
    throw Error(fmt::format("cannot find the CUDA module {}: /proc/self/exe cannot be read ({}); set "
                            "TRIDENT_CUDA_MODULE to its path",
                            kModuleFile, error.message()));
  return (exe.parent_path() / kModuleFile).string();
}

CudaModule& load() {
  require_cuda_build();
  const std::string path = module_path();
  // RTLD_NOW: a symbol the module lacks is an error here, not a crash at its first call.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    throw Error(fmt::format("cannot load the CUDA backend from {}: {} (the module and the CUDA, cuBLAS and "
                            "NCCL libraries it needs must be loadable on this node; runtime.backend = "
                            "\"cpu\" needs none of them; TRIDENT_CUDA_MODULE names another module file)",
                            path, dlerror()));
  auto* entry = reinterpret_cast<CudaModule* (*)()>(dlsym(handle, kEntryPoint));
  if (!entry) throw Error(fmt::format("{} is no CUDA module of trident: {}", path, dlerror()));
  return *entry();  // the handle stays open: the module's code runs until the process ends
}

}  // namespace

CudaModule& cuda_module() {
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  if (!current()) current() = &load();
  return *current();
}

CudaModule* loaded_cuda_module() { return current(); }

void register_cuda_module(CudaModule& module) { current() = &module; }

}  // namespace trident
