#pragma once
// The compute backend of a process, chosen by runtime.backend: Kokkos kernels on the host or the
// native CUDA kernels on a GPU. The object owns the runtime's start and end (Kokkos' initialisation
// and finalisation; the binding of the process to its GPU) and the process's one Kernels queue, so
// a command starts it once and everything else only sees Kernels.
#include <memory>
#include <string>

#include "core/config.hpp"
#include "kernels.hpp"

namespace trident {

class ComputeBackend {
 public:
  virtual ~ComputeBackend() = default;
  virtual Kernels& kernels() = 0;
  // One line for the log: "kokkos-Serial on the host" or "cuda on GPU 0: NVIDIA H100 ... (sm_90, ...)".
  virtual std::string describe() const = 0;
  // The bound GPU's UUID ("GPU-..."; comm/gpu_sharing.hpp compares them across a node); empty on the host.
  virtual std::string device_uuid() const = 0;
};

// local_rank / local_size: this process's index among the ranks on its node, and their number (which
// GPU it takes: gpu_binding.hpp); share_gpus: several ranks may take one GPU (runtime.comm = "mpi").
// This is the one place a rank binds its GPU. Backend::Cuda loads the CUDA module (cuda_module.hpp);
// Backend::Cpu loads no CUDA library. Throws trident::Error naming what is missing (a CUDA build, the
// CUDA module or the libraries it needs, a device, one GPU per rank).
std::unique_ptr<ComputeBackend> start_backend(Backend backend, int local_rank = 0, int local_size = 1,
                                              bool share_gpus = false);

// True in a CUDA build on a machine with a usable CUDA device (tests use it to skip visibly).
bool cuda_device_available();
// The CUDA devices this process can see (0 without a CUDA build or a device). In a CUDA build it loads
// the CUDA module, and throws trident::Error when that cannot be loaded.
int cuda_device_count();

// Throws trident::Error when this build of trident has no CUDA backend.
void require_cuda_build();

}  // namespace trident
