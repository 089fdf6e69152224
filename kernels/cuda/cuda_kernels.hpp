#pragma once
// Host-safe access to the CUDA backend's queue for code compiled without nvcc (e.g. NCCL calls of the
// communication layer, which must be enqueued on the same stream as the kernels).
#include "kernels.hpp"

namespace trident::cuda {

// The cudaStream_t (as void*) of a Kernels made by make_cuda_kernels(); nullptr for other backends.
void* native_stream(Kernels& kernels);

}  // namespace trident::cuda
