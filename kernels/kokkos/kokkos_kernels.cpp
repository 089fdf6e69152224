// make_kokkos_kernels(): the Kokkos backend on the default host execution space.
#include "kokkos/kokkos_kernels.hpp"

#include <cblas.h>

#include <chrono>
#include <vector>

namespace trident {

namespace kk {

double measure_sgemm_tflops() {
  const int M = 512, K = 768, N = 2304;  // one QKV projection of 512 tokens at GPT-2 small width
  std::vector<float> a(size_t(M) * K, 0.5f), b(size_t(K) * N, 0.25f), c(size_t(M) * N);
  auto gemm = [&] { cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.f, a.data(), K, b.data(), K, 0.f,
                                c.data(), N); };
  gemm();  // warm-up: threads, caches
  using clock = std::chrono::steady_clock;
  int reps = 0;
  const auto start = clock::now();
  double seconds = 0;
  while (seconds < 0.08 || reps < 3) {
    gemm();
    ++reps;
    seconds = std::chrono::duration<double>(clock::now() - start).count();
  }
  return 2.0 * M * N * K * reps / seconds / 1e12;
}

}  // namespace kk


// Explicit instantiation: the whole class is compiled (and checked) once here.
template class KokkosKernels<Kokkos::DefaultHostExecutionSpace>;

std::unique_ptr<Kernels> make_kokkos_kernels() {
  return std::make_unique<KokkosKernels<Kokkos::DefaultHostExecutionSpace>>();
}

}  // namespace trident
