#include "backend.hpp"

#include <Kokkos_Core.hpp>
#include <fmt/format.h>

#include "core/error.hpp"
#if TRIDENT_HAVE_CUDA
#include "cuda/device.hpp"
#include "gpu_binding.hpp"
#endif

namespace trident {
namespace {

class KokkosBackend final : public ComputeBackend {
 public:
  KokkosBackend() {
    // Test programs initialise Kokkos themselves; the backend finalises only what it started.
    if (!Kokkos::is_initialized()) {
      Kokkos::initialize();
      owns_kokkos_ = true;
    }
    kernels_ = make_kokkos_kernels();
  }
  ~KokkosBackend() override {
    kernels_.reset();  // its views must go before Kokkos::finalize
    if (owns_kokkos_) Kokkos::finalize();
  }
  Kernels& kernels() override { return *kernels_; }
  std::string describe() const override { return kernels_->name() + " on the host"; }
  std::string device_uuid() const override { return {}; }

 private:
  bool owns_kokkos_ = false;
  std::unique_ptr<Kernels> kernels_;
};

#if TRIDENT_HAVE_CUDA
class CudaBackend final : public ComputeBackend {
 public:
  CudaBackend(int local_rank, int local_size, bool share_gpus)
      : gpu_(choose_gpu(local_rank, local_size, cuda::device_count(), share_gpus).index) {
    cuda::set_device(gpu_);
    kernels_ = make_cuda_kernels();
  }
  Kernels& kernels() override { return *kernels_; }
  std::string describe() const override {
    return fmt::format("{} on GPU {} ({}): {} {}", kernels_->name(), gpu_, visible_devices_note(),
                       cuda::device_description(), device_uuid());
  }
  std::string device_uuid() const override { return cuda::device_uuid(); }

 private:
  int gpu_;
  std::unique_ptr<Kernels> kernels_;
};
#endif

}  // namespace

void require_cuda_build() {
#if !TRIDENT_HAVE_CUDA
  throw Error("runtime.backend = \"cuda\" needs a CUDA build of trident (this one was built without CUDA)");
#endif
}

#if !TRIDENT_HAVE_CUDA
std::unique_ptr<Kernels> make_cuda_kernels() {
  require_cuda_build();
  return nullptr;
}
#endif

int cuda_device_count() {
#if TRIDENT_HAVE_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

bool cuda_device_available() { return cuda_device_count() > 0; }

std::unique_ptr<ComputeBackend> start_backend(Backend backend, int local_rank, int local_size, bool share_gpus) {
  if (backend == Backend::Cpu) return std::make_unique<KokkosBackend>();
#if TRIDENT_HAVE_CUDA
  return std::make_unique<CudaBackend>(local_rank, local_size, share_gpus);
#else
  (void)local_rank;
  (void)local_size;
  (void)share_gpus;
  require_cuda_build();  // throws: this build has no CUDA
  return nullptr;
#endif
}

}  // namespace trident
