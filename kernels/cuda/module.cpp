// The CUDA module's table (cuda_module.hpp) and the function the core looks up after loading the module.
#include "backend.hpp"
#include "comm/nccl.hpp"
#include "comm/staging.hpp"
#include "cuda/cuda_kernels.hpp"
#include "cuda/device.hpp"
#include "cuda/module_parts.hpp"
#include "cuda_module.hpp"

namespace trident::cuda {
namespace {

class Module final : public CudaModule {
 public:
  int device_count() override { return cuda::device_count(); }
  std::unique_ptr<ComputeBackend> start_backend(int local_rank, int local_size, bool share_gpus) override {
    return cuda::start_backend(local_rank, local_size, share_gpus);
  }
  std::unique_ptr<Kernels> make_kernels() override { return cuda::make_kernels(); }
  void* native_stream(Kernels& kernels) override { return cuda::native_stream(kernels); }
  std::unique_ptr<DeviceCopies> make_copies(void* compute_stream) override {
    return cuda::make_copies(compute_stream);
  }
  std::unique_ptr<NcclComm> make_nccl(MPI_Comm comm, void* compute_stream, const Group& owner,
                                      bool point_to_point) override {
    return cuda::make_nccl(comm, compute_stream, owner, point_to_point);
  }
};

}  // namespace
}  // namespace trident::cuda

// Looked up by name (kernels/cuda_module.cpp); unmangled so that dlsym finds it.
extern "C" trident::CudaModule* trident_cuda_module() {
  static trident::cuda::Module module;
  return &module;
}
