#pragma once
// Shared vocabulary of the Kokkos backend: unmanaged View aliases over the raw pointers of the
// Kernels interface, the index policy, and the portable math namespace. Every kernel header is
// templated on the execution space ES and uses only these aliases, so the same source runs on a
// Kokkos built with Serial, OpenMP or CUDA.
#include <Kokkos_Core.hpp>

#include <cmath>
#include <cstdint>

namespace trident::kk {

// Kokkos 3.7 moved the math functions from Kokkos::Experimental into Kokkos.
#if KOKKOS_VERSION >= 30700
namespace kmath = ::Kokkos;
#else
namespace kmath = ::Kokkos::Experimental;
#endif

template <class ES>
using Device = Kokkos::Device<ES, typename ES::memory_space>;
using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;

// 1-D views (flat buffers).
template <class ES, class T = float>
using Vec = Kokkos::View<T*, Kokkos::LayoutRight, Device<ES>, Unmanaged>;
template <class ES, class T = float>
using CVec = Kokkos::View<const T*, Kokkos::LayoutRight, Device<ES>, Unmanaged>;

// Row-major 2-D views. These (and LayoutRight subviews of them) are what KokkosBlas::gemm hands to
// the BLAS TPL (sgemm); a LayoutStride view would fall back to KokkosKernels' native GEMM.
template <class ES>
using Mat = Kokkos::View<float**, Kokkos::LayoutRight, Device<ES>, Unmanaged>;
template <class ES>
using CMat = Kokkos::View<const float**, Kokkos::LayoutRight, Device<ES>, Unmanaged>;

template <class ES>
using Range = Kokkos::RangePolicy<ES, Kokkos::IndexType<int64_t>>;

// f(i, j) for every row i < rows and column j < cols: a team per row, the columns spread over the
// team's threads (contiguous, coalesced on a GPU; a plain inner loop on Serial/OpenMP). This avoids
// recovering (i, j) from a flat index with a 64-bit division per element, which costs more than the
// work of most elementwise kernels here.
template <class ES, class F>
void parallel_rows(const char* name, const ES& space, int64_t rows, int64_t cols, const F& f) {
  using Policy = Kokkos::TeamPolicy<ES>;
  using Member = typename Policy::member_type;
  if (rows <= 0 || cols <= 0) return;
  Kokkos::parallel_for(
      name, Policy(space, int(rows), Kokkos::AUTO), KOKKOS_LAMBDA(const Member& m) {
        const int64_t i = m.league_rank();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(m, cols), [&](const int64_t j) { f(i, j); });
      });
}

// Elementwise work over [0, n) in chunks: on a host execution space each work item runs a plain
// loop over elementwise_chunk() consecutive elements (with raw restrict pointers inside, the
// compiler can vectorise it: Kokkos' per-element functor call hides the loop from the vectoriser's
// alias analysis); on a device space each work item is one element. f(begin, end) does [begin, end).
template <class ES>
constexpr int64_t elementwise_chunk() {
  return Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename ES::memory_space>::accessible ? 2048 : 1;
}

template <class ES, class F>
void parallel_chunks(const char* name, const ES& space, int64_t n, const F& f) {
  constexpr int64_t chunk = elementwise_chunk<ES>();
  Kokkos::parallel_for(name, Range<ES>(space, 0, (n + chunk - 1) / chunk), KOKKOS_LAMBDA(int64_t c) {
    const int64_t begin = c * chunk;
    f(begin, begin + chunk < n ? begin + chunk : n);
  });
}

// Wrap a raw pointer (never owned) as an unmanaged view.
template <class ES, class T>
Vec<ES, T> vec(T* p, int64_t n) {
  return Vec<ES, T>(p, n);
}
template <class ES, class T>
CVec<ES, T> cvec(const T* p, int64_t n) {
  return CVec<ES, T>(p, n);
}
template <class ES>
Mat<ES> mat(float* p, int64_t rows, int64_t cols) {
  return Mat<ES>(p, rows, cols);
}
template <class ES>
CMat<ES> cmat(const float* p, int64_t rows, int64_t cols) {
  return CMat<ES>(p, rows, cols);
}

}  // namespace trident::kk
