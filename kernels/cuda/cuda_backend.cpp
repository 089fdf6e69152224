// The compute backend on a GPU (backend.hpp): the rank's GPU bound, the CUDA Kernels on it.
#include <fmt/format.h>

#include "backend.hpp"
#include "cuda/cuda_kernels.hpp"
#include "cuda/device.hpp"
#include "cuda/module_parts.hpp"
#include "gpu_binding.hpp"

namespace trident::cuda {
namespace {

class CudaBackend final : public ComputeBackend {
 public:
  CudaBackend(int local_rank, int local_size, bool share_gpus)
      : gpu_(choose_gpu(local_rank, local_size, device_count(), share_gpus).index) {
    set_device(gpu_);
    kernels_ = make_kernels();
  }
  Kernels& kernels() override { return *kernels_; }
  std::string describe() const override {
    return fmt::format("{} on GPU {} ({}): {} {}", kernels_->name(), gpu_, visible_devices_note(),
                       device_description(), device_uuid());
  }
  std::string device_uuid() const override { return cuda::device_uuid(); }

 private:
  int gpu_;
  std::unique_ptr<Kernels> kernels_;
};

}  // namespace

std::unique_ptr<ComputeBackend> start_backend(int local_rank, int local_size, bool share_gpus) {
  return std::make_unique<CudaBackend>(local_rank, local_size, share_gpus);
}

}  // namespace trident::cuda
