// Linked (whole) into programs that carry the CUDA backend in themselves instead of loading the module
// (tests, benchmarks: trident_lib_cuda_linked in cmake/TridentCuda.cmake): registers it at start-up,
// so that cuda_module() uses this copy and loads no second one.
#include "cuda_module.hpp"

extern "C" trident::CudaModule* trident_cuda_module();

namespace {
[[maybe_unused]] const bool registered = (trident::register_cuda_module(*trident_cuda_module()), true);
}  // namespace
