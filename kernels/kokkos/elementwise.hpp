#pragma once
// Elementwise ops and the deterministic sum of squares (gradient-norm clipping).
#include "kokkos/common.hpp"

namespace trident::kk {

template <class ES>
void fill(const ES& space, Vec<ES> x, float value) {
  Kokkos::parallel_for("trident::fill", Range<ES>(space, 0, x.extent(0)),
                       KOKKOS_LAMBDA(int64_t i) { x(i) = value; });
}

// out = a + b (out may alias a or b: each element reads before it writes).
template <class ES>
void add(const ES& space, Vec<ES> out, CVec<ES> a, CVec<ES> b) {
  Kokkos::parallel_for("trident::add", Range<ES>(space, 0, out.extent(0)),
                       KOKKOS_LAMBDA(int64_t i) { out(i) = a(i) + b(i); });
}

// y += x
template <class ES>
void accumulate(const ES& space, Vec<ES> y, CVec<ES> x) {
  Kokkos::parallel_for("trident::accumulate", Range<ES>(space, 0, y.extent(0)),
                       KOKKOS_LAMBDA(int64_t i) { y(i) += x(i); });
}

// x *= s
template <class ES>
void scale(const ES& space, Vec<ES> x, float s) {
  Kokkos::parallel_for("trident::scale", Range<ES>(space, 0, x.extent(0)),
                       KOKKOS_LAMBDA(int64_t i) { x(i) *= s; });
}

// ---- sum of squares with a fixed reduction order ----
// The order is part of the algorithm, not of the execution space: the input is cut into chunks of
// kSumChunk elements; inside a chunk, element i goes to lane i % kSumLanes (independent double
// accumulators, so the loop vectorises), the lanes are added 0..kSumLanes-1; the chunk partials
// are added in chunk order on the host. Same bits on Serial, OpenMP (any thread count) or CUDA.
constexpr int64_t kSumChunk = 8192;
constexpr int kSumLanes = 8;

inline int64_t sum_squares_chunks(int64_t n) { return (n + kSumChunk - 1) / kSumChunk; }

// `partial` needs sum_squares_chunks(n) doubles.
template <class ES>
double sum_squares(const ES& space, CVec<ES> x, Vec<ES, double> partial) {
  const int64_t n = x.extent(0);
  const int64_t chunks = sum_squares_chunks(n);
  if (chunks == 0) return 0.0;
  Kokkos::parallel_for(
      "trident::sum_squares", Range<ES>(space, 0, chunks), KOKKOS_LAMBDA(int64_t c) {
        const int64_t begin = c * kSumChunk;
        const int64_t end = begin + kSumChunk < n ? begin + kSumChunk : n;
        double lane[kSumLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t i = begin;
        for (; i + kSumLanes <= end; i += kSumLanes) {
          for (int l = 0; l < kSumLanes; ++l) {
            const double v = x(i + l);
            lane[l] += v * v;
          }
        }
        for (int l = 0; i < end; ++i, ++l) {
          const double v = x(i);
          lane[l] += v * v;
        }
        double s = 0.0;
        for (int l = 0; l < kSumLanes; ++l) s += lane[l];
        partial(c) = s;
      });
  auto sub = Kokkos::subview(partial, std::make_pair(int64_t(0), chunks));
  space.fence();
  auto host = Kokkos::create_mirror_view(sub);
  Kokkos::deep_copy(host, sub);  // a no-op when the memory is host memory
  double total = 0.0;
  for (int64_t c = 0; c < chunks; ++c) total += host(c);
  return total;
}

}  // namespace trident::kk
