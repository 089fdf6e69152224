// make_kokkos_kernels(): the Kokkos backend on the default host execution space.
#include "kokkos/kokkos_kernels.hpp"

namespace trident {

// Explicit instantiation: the whole class is compiled (and checked) once here.
template class KokkosKernels<Kokkos::DefaultHostExecutionSpace>;

std::unique_ptr<Kernels> make_kokkos_kernels() {
  return std::make_unique<KokkosKernels<Kokkos::DefaultHostExecutionSpace>>();
}

}  // namespace trident
