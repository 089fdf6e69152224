#include "backend.hpp"

#include <Kokkos_Core.hpp>
#include <fmt/format.h>

#include "core/error.hpp"
#if TRIDENT_HAVE_CUDA
#include "cuda/device.hpp"
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

 private:
  bool owns_kokkos_ = false;
  std::unique_ptr<Kernels> kernels_;
};

#if TRIDENT_HAVE_CUDA
class CudaBackend final : public ComputeBackend {
 public:
  CudaBackend(int local_rank, int local_size) : gpu_(local_rank) {
    const int gpus = cuda::device_count();
    TRIDENT_CHECK(gpus > 0, "runtime.backend = \"cuda\" but no CUDA device is usable on this node (no GPU or no driver)");
    TRIDENT_CHECK(local_size <= gpus,
                  "runtime.backend = \"cuda\": {} ranks on this node but only {} visible GPU(s); one rank per GPU",
                  local_size, gpus);
    cuda::set_device(gpu_);
    kernels_ = make_cuda_kernels();
  }
  Kernels& kernels() override { return *kernels_; }
  std::string describe() const override {
    return fmt::format("{} on GPU {}: {}", kernels_->name(), gpu_, cuda::device_description());
  }

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

bool cuda_device_available() {
#if TRIDENT_HAVE_CUDA
  return cuda::device_count() > 0;
#else
  return false;
#endif
}

std::unique_ptr<ComputeBackend> start_backend(Backend backend, int local_rank, int local_size) {
  if (backend == Backend::Cpu) return std::make_unique<KokkosBackend>();
#if TRIDENT_HAVE_CUDA
  return std::make_unique<CudaBackend>(local_rank, local_size);
#else
  (void)local_rank;
  (void)local_size;
  require_cuda_build();  // throws: this build has no CUDA
  return nullptr;
#endif
}

}  // namespace trident
