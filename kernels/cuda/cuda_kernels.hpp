#pragma once
// The CUDA Kernels and their queue, for the module's code compiled without nvcc (e.g. the NCCL
// transport, whose calls must be enqueued on the same stream as the kernels).
#include <memory>

#include "kernels.hpp"

namespace trident::cuda {

// The native CUDA backend on the current device (kernels.hpp's make_cuda_kernels, which reaches it
// through the CUDA module).
std::unique_ptr<Kernels> make_kernels();

// The cudaStream_t (as void*) of a Kernels made by make_kernels(); nullptr for other backends.
void* native_stream(Kernels& kernels);

}  // namespace trident::cuda
