#include "backend.hpp"

#include <Kokkos_Core.hpp>

#include "core/error.hpp"
#include "cuda_module.hpp"

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

}  // namespace

void require_cuda_build() {
#if !TRIDENT_HAVE_CUDA
  throw Error("runtime.backend = \"cuda\" needs a CUDA build of trident (this one was built without CUDA)");
#endif
}

// The CUDA side lives in the CUDA module (cuda_module.hpp): a CPU run never loads it.
std::unique_ptr<Kernels> make_cuda_kernels() { return cuda_module().make_kernels(); }

int cuda_device_count() {
#if TRIDENT_HAVE_CUDA
  return cuda_module().device_count();
#else
  return 0;
#endif
}

bool cuda_device_available() { return cuda_device_count() > 0; }

std::unique_ptr<ComputeBackend> start_backend(Backend backend, int local_rank, int local_size, bool share_gpus) {
  if (backend == Backend::Cpu) return std::make_unique<KokkosBackend>();
  return cuda_module().start_backend(local_rank, local_size, share_gpus);
}

}  // namespace trident
