#pragma once
// gpu-sim: what device code sees: the thread and block indices, barriers, 32-lane warp shuffles and
// votes, atomics, fences and CUDA's math intrinsics. The block runner (src/block_runner.cpp) runs each
// thread of a block as a fiber on one host thread and sets the indices before it switches to a thread;
// a barrier, shuffle or vote switches to the block's other threads until every thread it waits for
// has arrived (or reports a fault when that can never happen: gpusim/README.md).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "gpusim/driver_types.h"

// The built-in variables. Plain thread-locals of a trivial type: one host thread runs one block at a
// time, and the runner rewrites threadIdx whenever it switches to another thread of the block.
extern __thread uint3 threadIdx;
extern __thread uint3 blockIdx;
extern __thread uint3 blockDim;
extern __thread uint3 gridDim;
constexpr int warpSize = 32;

// Dynamically sized shared memory. nvcc spells it `extern __shared__ T name[];`, which has no host
// equivalent; CUDA code that runs on gpu-sim declares it with this macro instead (under nvcc:
// `extern __shared__ __align__(16) unsigned char storage[]; T* name = (T*)storage;`).
#define GPUSIM_DYNAMIC_SHARED(T, name) T* name = static_cast<T*>(::gpusim::detail::dynamic_shared_memory())

namespace gpusim::detail {

enum class ShuffleMode { Index, Up, Down, Xor };

void syncthreads();
int syncthreads_reduce(int predicate, int op);  // op: 0 count, 1 and, 2 or
void syncwarp(unsigned mask);
// The calling lane offers `bits` and receives the bits of the lane that PTX's shfl.sync picks for
// (mode, b, c); all lanes of `mask` must make the same call.
uint64_t shuffle(unsigned mask, uint64_t bits, ShuffleMode mode, unsigned b, unsigned c);
unsigned ballot(unsigned mask, int predicate);
unsigned activemask();
void* dynamic_shared_memory();  // the block's dynamically sized shared memory (the launch's bytes)
// A warp-collective operation (the WMMA calls of mma.h): every lane of the caller's warp, all 32, calls
// it with the same `complete` and its own `arguments`; the last lane to arrive runs
// complete(the 32 lanes' arguments, in lane order) once, before any lane goes on. Lanes missing, exited
// or in another warp operation fault as for a shuffle with a full mask.
using WarpCollective = void (*)(void* const* lane_arguments);
void warp_collective(const char* what, void* arguments, WarpCollective complete);
[[noreturn]] void trap(const char* what);

template <class T>
T shuffle_value(unsigned mask, T var, ShuffleMode mode, unsigned b, unsigned c) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shuffles move values of at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &var, sizeof(T));
  bits = shuffle(mask, bits, mode, b, c);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

// The c operand CUDA passes to shfl.sync for a sub-warp width (a power of two <= 32).
inline unsigned shuffle_clamp(int width, bool up) {
  return (unsigned(warpSize - width) << 8) | (up ? 0u : 0x1fu);
}

template <class T, class F>
T atomic_update(T* address, F f) {
  T old = __atomic_load_n(address, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(address, &old, f(old), true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
  }
  return old;
}

template <class T, class F>
T atomic_update_bits(T* address, F f) {  // floating point: compare-and-swap on the bits
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  auto* a = reinterpret_cast<Bits*>(address);
  Bits old = __atomic_load_n(a, __ATOMIC_RELAXED);
  for (;;) {
    T old_value, new_value;
    std::memcpy(&old_value, &old, sizeof(T));
    new_value = f(old_value);
    Bits desired;
    std::memcpy(&desired, &new_value, sizeof(T));
    if (__atomic_compare_exchange_n(a, &old, desired, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) return old_value;
  }
}

}  // namespace gpusim::detail

// ---- barriers ----
inline void __syncthreads() { gpusim::detail::syncthreads(); }
inline int __syncthreads_count(int p) { return gpusim::detail::syncthreads_reduce(p, 0); }
inline int __syncthreads_and(int p) { return gpusim::detail::syncthreads_reduce(p, 1); }
inline int __syncthreads_or(int p) { return gpusim::detail::syncthreads_reduce(p, 2); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { gpusim::detail::syncwarp(mask); }

// ---- warp shuffles and votes (the _sync forms; the pre-Volta forms do not exist here) ----
template <class T>
T __shfl_sync(unsigned mask, T var, int srcLane, int width = warpSize) {
  return gpusim::detail::shuffle_value(mask, var, gpusim::detail::ShuffleMode::Index, unsigned(srcLane),
                                       gpusim::detail::shuffle_clamp(width, false));
}
template <class T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  return gpusim::detail::shuffle_value(mask, var, gpusim::detail::ShuffleMode::Up, delta,
                                       gpusim::detail::shuffle_clamp(width, true));
}
template <class T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  return gpusim::detail::shuffle_value(mask, var, gpusim::detail::ShuffleMode::Down, delta,
                                       gpusim::detail::shuffle_clamp(width, false));
}
template <class T>
T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = warpSize) {
  return gpusim::detail::shuffle_value(mask, var, gpusim::detail::ShuffleMode::Xor, unsigned(laneMask),
                                       gpusim::detail::shuffle_clamp(width, false));
}
inline unsigned __ballot_sync(unsigned mask, int predicate) { return gpusim::detail::ballot(mask, predicate); }
inline int __any_sync(unsigned mask, int predicate) { return gpusim::detail::ballot(mask, predicate) != 0; }
inline int __all_sync(unsigned mask, int predicate) { return gpusim::detail::ballot(mask, !predicate) == 0; }
inline unsigned __activemask() { return gpusim::detail::activemask(); }

// ---- fences, traps, clocks ----
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
[[noreturn]] inline void __trap() { gpusim::detail::trap("__trap() called"); }
inline long long clock64() { return (long long)__builtin_ia32_rdtsc(); }

// ---- atomics ----
#define GPUSIM_INTEGER_ATOMICS(T)                                                                     \
  inline T atomicAdd(T* a, T v) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); }                \
  inline T atomicExch(T* a, T v) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); }              \
  inline T atomicMin(T* a, T v) {                                                                     \
    return gpusim::detail::atomic_update(a, [v](T o) { return v < o ? v : o; });                      \
  }                                                                                                   \
  inline T atomicMax(T* a, T v) {                                                                     \
    return gpusim::detail::atomic_update(a, [v](T o) { return v > o ? v : o; });                      \
  }                                                                                                   \
  inline T atomicAnd(T* a, T v) { return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); }                \
  inline T atomicOr(T* a, T v) { return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); }                  \
  inline T atomicXor(T* a, T v) { return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); }                \
  inline T atomicCAS(T* a, T compare, T v) {                                                          \
    __atomic_compare_exchange_n(a, &compare, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);           \
    return compare;                                                                                   \
  }
GPUSIM_INTEGER_ATOMICS(int)
GPUSIM_INTEGER_ATOMICS(unsigned int)
GPUSIM_INTEGER_ATOMICS(unsigned long long)
GPUSIM_INTEGER_ATOMICS(long long)
#undef GPUSIM_INTEGER_ATOMICS
inline int atomicSub(int* a, int v) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicSub(unsigned* a, unsigned v) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicInc(unsigned* a, unsigned limit) {
  return gpusim::detail::atomic_update(a, [limit](unsigned o) { return o >= limit ? 0u : o + 1; });
}
inline unsigned atomicDec(unsigned* a, unsigned limit) {
  return gpusim::detail::atomic_update(a, [limit](unsigned o) { return (o == 0 || o > limit) ? limit : o - 1; });
}
inline float atomicAdd(float* a, float v) {
  return gpusim::detail::atomic_update_bits(a, [v](float o) { return o + v; });
}
inline double atomicAdd(double* a, double v) {
  return gpusim::detail::atomic_update_bits(a, [v](double o) { return o + v; });
}
inline float atomicExch(float* a, float v) {
  return gpusim::detail::atomic_update_bits(a, [v](float) { return v; });
}

// ---- integer and bit intrinsics ----
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(unsigned(x)); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}

// ---- loads and stores with cache hints: plain memory accesses here ----
template <class T>
inline T __ldg(const T* p) { return *p; }
template <class T>
inline T __ldcs(const T* p) { return *p; }
template <class T>
inline void __stcs(T* p, T v) { *p = v; }
template <class T>
inline void __stcg(T* p, T v) { *p = v; }

// ---- floating-point intrinsics. The host build does not contract a*b+c into an FMA (x86-64 without
// -march), so each of these rounds once, as the _rn intrinsics promise; nvcc's own contraction of plain
// expressions is therefore not reproduced (results agree to rounding, not bit for bit). ----
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __dsqrt_rn(double a) { return std::sqrt(a); }
inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanhf(float x) { return tanhf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float exp10f(float x) { return powf(10.0f, x); }
inline int __float2int_rn(float x) { return int(std::nearbyint(x)); }
inline int __float2int_rz(float x) { return int(x); }
inline unsigned __float2uint_rn(float x) { return unsigned(std::nearbyint(x)); }
inline float __int2float_rn(int x) { return float(x); }
inline float __int_as_float(int x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
inline int __float_as_int(float x) {
  int i;
  std::memcpy(&i, &x, 4);
  return i;
}
inline float __uint_as_float(unsigned x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
inline unsigned __float_as_uint(float x) {
  unsigned i;
  std::memcpy(&i, &x, 4);
  return i;
}
inline double __longlong_as_double(long long x) {
  double d;
  std::memcpy(&d, &x, 8);
  return d;
}
inline long long __double_as_longlong(double x) {
  long long i;
  std::memcpy(&i, &x, 8);
  return i;
}
