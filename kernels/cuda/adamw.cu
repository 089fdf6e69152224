// AdamW exactly as torch.optim.AdamW and the Kokkos backend (kernels/kokkos/adamw.hpp):
//   p *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//   p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps),  bc1 = 1 - b1^step, bc2 = 1 - b2^step,
// with the scalar factors computed on the host in double, as there. The element update uses the
// explicitly rounded intrinsics (__fmul_rn, __fadd_rn, ...) so that nvcc does not contract it into
// FMAs: each operation rounds once, as in the host build (x86-64 without -march: no FMA), so the
// CUDA and Kokkos backends give the same bits for the same inputs.
//
// Multi-tensor: one launch updates up to kSegmentsPerLaunch segments (tensors, or adjacent tensors of
// one weight decay), whose table travels in the kernel's arguments (as apex's multi_tensor_apply
// passes its tensor lists), so GPT-2's ~150 tensors take 3 launches instead of 150. Each thread finds
// its element's segment by binary search in the table. With a bf16 working copy the same pass writes
// the updated master rounded to bf16.
#include <algorithm>
#include <cmath>

#include "cuda/bf16.cuh"
#include "cuda/check.cuh"
#include "cuda/ops.cuh"

namespace trident::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kSegmentsPerLaunch = 64;

struct AdamWScalars {
  float beta1, beta2, one_minus_b1, one_minus_b2, eps, step_size, bc2_sqrt;
};

// Segments [start[s], start[s + 1]) of one launch, s < count, with their decay factors 1 - lr*wd.
struct SegmentTable {
  int64_t start[kSegmentsPerLaunch + 1];
  float decay[kSegmentsPerLaunch];
  int count;
};

__device__ int segment_of(const SegmentTable& t, int64_t i) {
  int lo = 0, hi = t.count - 1;  // the last s with start[s] <= i
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (t.start[mid] <= i)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, uint16_t* working, SegmentTable t,
                             AdamWScalars s) {
  const int64_t first = t.start[0];
  TRIDENT_GRID_STRIDE(k, t.start[t.count] - first) {
    const int64_t i = first + k;
    const float decay = t.decay[segment_of(t, i)];
    const float g = grad[i];
    const float mi = __fadd_rn(__fmul_rn(m[i], s.beta1), __fmul_rn(s.one_minus_b1, g));
    const float vi = __fadd_rn(__fmul_rn(v[i], s.beta2), __fmul_rn(__fmul_rn(s.one_minus_b2, g), g));
    m[i] = mi;
    v[i] = vi;
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bc2_sqrt), s.eps);
    // torch's addcdiv order: (step_size * m) / denom
    const float p = __fsub_rn(__fmul_rn(param[i], decay), __fdiv_rn(__fmul_rn(s.step_size, mi), denom));
    param[i] = p;
    if (working) working[i] = bf16_bits(p);
  }
}

}  // namespace

void adamw_update(cudaStream_t stream, float* param, const float* grad, float* m, float* v, int64_t n,
                  const std::vector<AdamWSegment>& segments, const AdamWStep& h, uint16_t* working) {
  if (n <= 0) return;
  const double bc1 = 1.0 - std::pow(double(h.beta1), double(h.step));
  const double bc2 = 1.0 - std::pow(double(h.beta2), double(h.step));
  AdamWScalars s;
  s.beta1 = h.beta1;
  s.beta2 = h.beta2;
  s.one_minus_b1 = float(1.0 - double(h.beta1));
  s.one_minus_b2 = float(1.0 - double(h.beta2));
  s.eps = h.eps;
  s.step_size = float(double(h.lr) / bc1);
  s.bc2_sqrt = float(std::sqrt(bc2));
  for (size_t first = 0; first < segments.size(); first += kSegmentsPerLaunch) {
    SegmentTable t{};
    t.count = int(std::min<size_t>(kSegmentsPerLaunch, segments.size() - first));
    for (int j = 0; j < t.count; ++j) {
      t.start[j] = segments[first + size_t(j)].begin;
      t.decay[j] = float(1.0 - double(h.lr) * double(segments[first + size_t(j)].weight_decay));
    }
    t.start[t.count] = first + size_t(t.count) < segments.size() ? segments[first + size_t(t.count)].begin : n;
    const int64_t elements = t.start[t.count] - t.start[0];
    TRIDENT_CUDA_CHECK(launch(adamw_kernel, grid_for(elements, kThreads), kThreads, 0, stream, param, grad, m, v,
                              working, t, s));
  }
}

}  // namespace trident::cuda
