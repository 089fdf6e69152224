#pragma once
// gpu-sim: kernel launches. CUDA's typed cudaLaunchKernelEx (the C++ template of cuda_runtime.h) is
// the launch form that both nvcc and a host compiler accept, so CUDA code written with it runs
// unchanged here: the arguments are converted to the kernel's parameter types and copied (as a launch
// does), and every thread of the grid calls the kernel with its own copy.
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "gpusim/driver_types.h"

namespace gpusim {

struct KernelLaunch {
  const void* function = nullptr;  // for cudaFuncSetAttribute's limits and for messages
  dim3 grid, block;
  size_t dynamic_shared_bytes = 0;
  cudaStream_t stream = nullptr;
  std::function<void()> run_thread;  // one thread of the kernel (threadIdx etc. set by the runner)
  std::vector<const void*> pointers;  // the pointer arguments: each null or in device-accessible memory
};

// Validates the configuration as a GPU does (errors are returned and become the calling thread's
// last error) and queues the grid on the stream.
cudaError_t launch(KernelLaunch launch);

template <class Tuple, size_t... I>
std::vector<const void*> pointer_arguments(const Tuple& args, std::index_sequence<I...>) {
  std::vector<const void*> out;
  (
      [&] {
        using T = std::tuple_element_t<I, Tuple>;
        if constexpr (std::is_pointer_v<T>) out.push_back(static_cast<const void*>(std::get<I>(args)));
      }(),
      ...);
  return out;
}

}  // namespace gpusim

template <class... ExpTypes, class... ActTypes>
cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t* config, void (*kernel)(ExpTypes...), ActTypes&&... args) {
  static_assert(sizeof...(ExpTypes) == sizeof...(ActTypes), "kernel launched with the wrong number of arguments");
  using Params = std::tuple<std::decay_t<ExpTypes>...>;
  auto params = std::make_shared<const Params>(std::forward<ActTypes>(args)...);
  gpusim::KernelLaunch l;
  l.function = reinterpret_cast<const void*>(kernel);
  if (config) {
    l.grid = config->gridDim;
    l.block = config->blockDim;
    l.dynamic_shared_bytes = config->dynamicSmemBytes;
    l.stream = config->stream;
  }
  l.pointers = gpusim::pointer_arguments(*params, std::index_sequence_for<ExpTypes...>{});
  l.run_thread = [kernel, params] { std::apply(kernel, *params); };
  return config ? gpusim::launch(std::move(l)) : cudaErrorInvalidValue;
}
