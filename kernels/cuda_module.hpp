#pragma once
// The CUDA backend is a module loaded at run time (libtrident_cuda.so; cmake/TridentCuda.cmake says
// why): every call into the CUDA runtime, cuBLAS(Lt) or NCCL is in it, so a run on the CPU backend
// never loads a CUDA library. The core reaches the module through this table, on first need only
// (runtime.backend = "cuda", a device count). The module uses the core's code (errors, logging, the
// watchdog) from the executable, which exports it: a process has one copy of trident's state.
#include <mpi.h>

#include <memory>

namespace trident {

class ComputeBackend;
class DeviceCopies;
class Group;
class Kernels;
class NcclComm;

class CudaModule {
 public:
  virtual ~CudaModule() = default;
  // The CUDA devices this process can see (0 when there is no driver or no device).
  virtual int device_count() = 0;
  // backend.hpp's start_backend for Backend::Cuda.
  virtual std::unique_ptr<ComputeBackend> start_backend(int local_rank, int local_size, bool share_gpus) = 0;
  // kernels.hpp's make_cuda_kernels.
  virtual std::unique_ptr<Kernels> make_kernels() = 0;
  // The cudaStream_t (as void*) of Kernels this module made; nullptr for any other Kernels.
  virtual void* native_stream(Kernels& kernels) = 0;
  // comm/staging.hpp's copies between device and page-locked host memory on the stream `compute_stream`.
  virtual std::unique_ptr<DeviceCopies> make_copies(void* compute_stream) = 0;
  // comm/nccl.hpp's transport for group `owner`, over its MPI communicator `comm`.
  virtual std::unique_ptr<NcclComm> make_nccl(MPI_Comm comm, void* compute_stream, const Group& owner,
                                              bool point_to_point) = 0;
};

// The module: the one linked into this program (register_cuda_module), else, on the first call, the
// file libtrident_cuda.so in the executable's directory or the file the environment variable
// TRIDENT_CUDA_MODULE names. Throws trident::Error in a build without CUDA, and naming the file and
// the loader's message when it cannot be loaded (a node without the CUDA libraries, a missing file).
CudaModule& cuda_module();

// The module when it is linked in or already loaded, else nullptr; never loads it. Kernels on a GPU
// exist only once it is, so a caller holding host Kernels need not load it to learn that.
CudaModule* loaded_cuda_module();

// Programs that link the CUDA backend in instead of loading it (tests, benchmarks) register it at
// start-up (kernels/cuda/link_statically.cpp).
void register_cuda_module(CudaModule& module);

}  // namespace trident
