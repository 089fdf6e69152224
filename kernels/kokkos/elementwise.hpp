#pragma once
// Elementwise ops and the deterministic sum of squares (gradient-norm clipping).
#include "kokkos/common.hpp"

namespace trident::kk {

template <class ES, class T>
void fill(const ES& space, Vec<ES, T> x, T value) {
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

// coef(0) = clip_coefficient's rule (kernels.hpp), computed by one work item.
template <class ES>
void clip_coefficient(const ES& space, Vec<ES> coef, CVec<ES, double> square_sums, double max_norm) {
  Kokkos::parallel_for(
      "trident::clip_coefficient", Range<ES>(space, 0, 1), KOKKOS_LAMBDA(int64_t) {
        const double c = max_norm / (kmath::sqrt(square_sums(0) + square_sums(1)) + 1e-6);
        coef(0) = c >= 1.0 ? 1.0f : float(c);
      });
}

// x *= coef(0) unless it is 1
template <class ES>
void scale_by(const ES& space, Vec<ES> x, CVec<ES> coef) {
  Kokkos::parallel_for("trident::scale_by", Range<ES>(space, 0, x.extent(0)), KOKKOS_LAMBDA(int64_t i) {
    const float s = coef(0);
    if (s != 1.0f) x(i) *= s;
  });
}

// ---- sums (of squares) with a fixed reduction order, into a device double ----
// The order is part of the algorithm, not of the execution space: the input is cut into chunks of
// kSumChunk elements; inside a chunk, element i goes to lane i % kSumLanes (independent double
// accumulators, so the loop vectorises), the lanes are added 0..kSumLanes-1; the chunk partials
// are added in chunk order by one work item, onto acc(0). Same bits on Serial, OpenMP or CUDA.
constexpr int64_t kSumChunk = 8192;
constexpr int kSumLanes = 8;

inline int64_t sum_chunks(int64_t n) { return (n + kSumChunk - 1) / kSumChunk; }

// acc(0) += sum x(i)^2 (square) or sum x(i). `partial` needs sum_chunks(n) doubles.
template <class ES>
void sum_into(const ES& space, Vec<ES, double> acc, CVec<ES> x, Vec<ES, double> partial, bool square) {
  const int64_t n = x.extent(0);
  const int64_t chunks = sum_chunks(n);
  if (chunks == 0) return;
  Kokkos::parallel_for(
      "trident::sum_chunks", Range<ES>(space, 0, chunks), KOKKOS_LAMBDA(int64_t c) {
        const int64_t begin = c * kSumChunk;
        const int64_t end = begin + kSumChunk < n ? begin + kSumChunk : n;
        double lane[kSumLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t i = begin;
        for (; i + kSumLanes <= end; i += kSumLanes) {
          for (int l = 0; l < kSumLanes; ++l) {
            const double v = x(i + l);
            lane[l] += square ? v * v : v;
          }
        }
        for (int l = 0; i < end; ++i, ++l) {
          const double v = x(i);
          lane[l] += square ? v * v : v;
        }
        double s = 0.0;
        for (int l = 0; l < kSumLanes; ++l) s += lane[l];
        partial(c) = s;
      });
  Kokkos::parallel_for(
      "trident::sum_partials", Range<ES>(space, 0, 1), KOKKOS_LAMBDA(int64_t) {
        double total = 0.0;
        for (int64_t c = 0; c < chunks; ++c) total += partial(c);
        acc(0) += total;
      });
}

}  // namespace trident::kk
