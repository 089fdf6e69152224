#pragma once
// gpu-sim's mma.h: CUDA's warp matrix functions (nvcuda::wmma) for the 16x16x16 shape with bfloat16
// operands and fp32 accumulators, what sm_80 and later run on tensor cores. The names and signatures
// are those of the CUDA toolkit's mma.h (crt/mma.h), so one source compiles with nvcc and here.
//
// A GPU spreads a fragment over the 32 lanes of a warp in a layout CUDA does not document; here every
// lane holds the whole tile, element (r, c) of the logical matrix at x[r * cols + c] (A is 16x16 of
// M x K, B of K x N, the accumulator of M x N), so num_elements is 256, not a GPU's 8. Kernels may
// therefore only do what is layout-free: fill_fragment, and the same element-wise operation on every
// x[i] (a uniform scale). Anything that depends on which row or column x[i] is, or on the lane, has no
// meaning on a GPU; here it leaves the lanes' copies different, and the next mma_sync or
// store_matrix_sync faults on it. Row-wise work belongs in shared memory.
//
// Each load, store and mma is a warp operation (gpusim::detail::warp_collective): all 32 lanes must
// reach the same call together, with the same pointer, ldm and layout, as CUDA requires; the last lane
// to arrive does the work once for the warp. What a GPU requires and may not check, gpu-sim checks and
// faults on (the device's sticky cudaErrorLaunchFailure, naming the kernel, block and thread):
//  - a pointer that is not 256-bit (32-byte) aligned;
//  - ldm not a multiple of 16 bytes (8 bfloat16 elements, 4 floats);
//  - lanes missing (a partial warp, exited or diverged lanes) or calling with different arguments;
//  - lanes whose fragments differ (a layout-dependent element operation).
// mma_sync: D = A B + C with each product exact (bf16 x bf16 fits fp32) and the 16 products of a dot
// product summed exactly (double), then added to C and rounded once to fp32. Tensor cores round their
// fp32 accumulation in an undocumented way: a GPU's results may differ in the last bits.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>

#include "cuda_bf16.h"
#include "gpusim/device_builtins.h"

namespace nvcuda {
namespace wmma {

struct row_major;
struct col_major;
struct matrix_a;
struct matrix_b;
struct accumulator;

enum layout_t { mem_row_major, mem_col_major };

namespace detail {

// The whole rows x cols tile, row-major; the members CUDA's __frag_base has.
template <class T, int rows, int cols>
struct tile {
  enum { num_elements = rows * cols };
  enum { num_storage_elements = rows * cols };
  using element_type = T;
  using storage_element_type = T;
  static constexpr int kRows = rows, kCols = cols;
  T x[rows * cols];
};

}  // namespace detail

template <class Use, int m, int n, int k, class T, class Layout = void>
class fragment;

// The fragments gpu-sim has: 16x16x16, bfloat16 A and B in either layout, fp32 accumulator.
template <class Layout>
class fragment<matrix_a, 16, 16, 16, __nv_bfloat16, Layout> : public detail::tile<__nv_bfloat16, 16, 16> {
 public:
  static constexpr bool kColMajor = std::is_same<Layout, col_major>::value;
};
template <class Layout>
class fragment<matrix_b, 16, 16, 16, __nv_bfloat16, Layout> : public detail::tile<__nv_bfloat16, 16, 16> {
 public:
  static constexpr bool kColMajor = std::is_same<Layout, col_major>::value;
};
template <>
class fragment<accumulator, 16, 16, 16, float, void> : public detail::tile<float, 16, 16> {};

template <class T, int rows, int cols>
inline void fill_fragment(detail::tile<T, rows, cols>& f, const typename std::common_type<T>::type& value) {
  for (int i = 0; i < rows * cols; ++i) f.x[i] = value;
}

namespace detail {

[[noreturn]] inline void fault(const char* op, const std::string& what) {
  ::gpusim::detail::trap((std::string("wmma::") + op + ": " + what).c_str());
}

// What each lane passes to a load or store.
struct TransferArguments {
  void* fragment;
  const void* memory;
  unsigned ldm;
  bool col_major;
};

// The rules CUDA states for load_matrix_sync and store_matrix_sync, and that every lane agrees.
inline void check_transfer(const char* op, void* const* lanes, size_t element_bytes) {
  const auto& first = *static_cast<const TransferArguments*>(lanes[0]);
  for (int l = 1; l < 32; ++l) {
    const auto& a = *static_cast<const TransferArguments*>(lanes[l]);
    if (a.memory != first.memory || a.ldm != first.ldm || a.col_major != first.col_major)
      fault(op, "lane " + std::to_string(l) + " passes another pointer, ldm or layout than lane 0 (the whole warp "
                "must make the same call)");
  }
  if (reinterpret_cast<uintptr_t>(first.memory) % 32 != 0) {
    char where[32];
    std::snprintf(where, sizeof where, "%p", first.memory);
    fault(op, std::string("pointer ") + where + " is not 256-bit (32-byte) aligned");
  }
  if ((size_t(first.ldm) * element_bytes) % 16 != 0)
    fault(op, "ldm " + std::to_string(first.ldm) + " is not a multiple of 16 bytes (" +
                  std::to_string(16 / element_bytes) + " elements of this type)");
}

// Every lane's fragment must hold lane 0's values (bit for bit).
template <class Frag>
void check_same_in_every_lane(const char* op, const char* name, const Frag* const* frags) {
  for (int l = 1; l < 32; ++l)
    if (std::memcmp(frags[l]->x, frags[0]->x, sizeof(frags[0]->x)) != 0)
      fault(op, std::string("fragment ") + name + " of lane " + std::to_string(l) +
                    " differs from lane 0's: the kernel changed fragment elements by lane or position, which "
                    "depends on a GPU's undocumented fragment layout");
}

template <class Frag>
void complete_load(void* const* lanes) {
  check_transfer("load_matrix_sync", lanes, sizeof(typename Frag::element_type));
  const auto& first = *static_cast<const TransferArguments*>(lanes[0]);
  const auto* src = static_cast<const typename Frag::element_type*>(first.memory);
  Frag loaded;
  for (int r = 0; r < Frag::kRows; ++r)
    for (int c = 0; c < Frag::kCols; ++c)
      loaded.x[r * Frag::kCols + c] = first.col_major ? src[size_t(c) * first.ldm + r] : src[size_t(r) * first.ldm + c];
  for (int l = 0; l < 32; ++l) *static_cast<Frag*>(static_cast<const TransferArguments*>(lanes[l])->fragment) = loaded;
}

template <class Frag>
void complete_store(void* const* lanes) {
  check_transfer("store_matrix_sync", lanes, sizeof(typename Frag::element_type));
  const Frag* frags[32];
  for (int l = 0; l < 32; ++l) frags[l] = static_cast<const Frag*>(static_cast<const TransferArguments*>(lanes[l])->fragment);
  check_same_in_every_lane("store_matrix_sync", "to store", frags);
  const auto& first = *static_cast<const TransferArguments*>(lanes[0]);
  auto* dst = static_cast<typename Frag::element_type*>(const_cast<void*>(first.memory));
  for (int r = 0; r < Frag::kRows; ++r)
    for (int c = 0; c < Frag::kCols; ++c)
      (first.col_major ? dst[size_t(c) * first.ldm + r] : dst[size_t(r) * first.ldm + c]) = frags[0]->x[r * Frag::kCols + c];
}

template <class Frag>
void load(Frag& f, const void* p, unsigned ldm, bool col_major) {
  TransferArguments a{&f, p, ldm, col_major};
  ::gpusim::detail::warp_collective("wmma::load_matrix_sync", &a, complete_load<Frag>);
}

using Accumulator = fragment<accumulator, 16, 16, 16, float>;

template <class A, class B>
struct MmaArguments {
  Accumulator* d;
  const A* a;
  const B* b;
  const Accumulator* c;
};

template <class A, class B>
void complete_mma(void* const* lanes) {
  const A* as[32];
  const B* bs[32];
  const Accumulator* cs[32];
  for (int l = 0; l < 32; ++l) {
    const auto& m = *static_cast<const MmaArguments<A, B>*>(lanes[l]);
    as[l] = m.a;
    bs[l] = m.b;
    cs[l] = m.c;
  }
  check_same_in_every_lane("mma_sync", "a", as);
  check_same_in_every_lane("mma_sync", "b", bs);
  check_same_in_every_lane("mma_sync", "c", cs);
  Accumulator d;  // not in place: d may be c
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      double dot = 0.0;  // exact: 16 products of 8-bit significands
      for (int k = 0; k < 16; ++k)
        dot += double(__bfloat162float(as[0]->x[i * 16 + k])) * double(__bfloat162float(bs[0]->x[k * 16 + j]));
      d.x[i * 16 + j] = float(double(cs[0]->x[i * 16 + j]) + dot);
    }
  for (int l = 0; l < 32; ++l) *static_cast<const MmaArguments<A, B>*>(lanes[l])->d = d;
}

}  // namespace detail

template <class Use, class Layout>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, Layout>& f, const __nv_bfloat16* p,
                             unsigned ldm) {
  detail::load(f, p, ldm, fragment<Use, 16, 16, 16, __nv_bfloat16, Layout>::kColMajor);
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm,
                             layout_t layout) {
  detail::load(f, p, ldm, layout == mem_col_major);
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm,
                              layout_t layout) {
  detail::TransferArguments a{const_cast<fragment<accumulator, 16, 16, 16, float>*>(&f), p, ldm,
                              layout == mem_col_major};
  ::gpusim::detail::warp_collective("wmma::store_matrix_sync", &a,
                                    detail::complete_store<fragment<accumulator, 16, 16, 16, float>>);
}

template <class LayoutA, class LayoutB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
                     const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LayoutA>& a,
                     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LayoutB>& b,
                     const fragment<accumulator, 16, 16, 16, float>& c) {
  using A = fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LayoutA>;
  using B = fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LayoutB>;
  detail::MmaArguments<A, B> m{&d, &a, &b, &c};
  ::gpusim::detail::warp_collective("wmma::mma_sync", &m, detail::complete_mma<A, B>);
}

}  // namespace wmma
}  // namespace nvcuda
