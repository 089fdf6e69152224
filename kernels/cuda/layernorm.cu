// LayerNorm over the last axis (eps from the caller) with weight and bias, and RMSNorm (no centring, no
// bias), forward and backward side by side, following kernels/kokkos/layernorm.hpp. One warp per row;
// statistics in double (LayerNorm: two passes, mean then the centred variance; RMSNorm: the mean of
// squares); mean and rstd saved as float. Each lane takes columns lane, lane+32,
// ...; the lanes' partial sums are combined by a butterfly (reduce.cuh), so the order is fixed.
// dweight/dbias are column sums over the rows: two-pass deterministic reduction (reduce.cuh).
#include "cuda/check.cuh"
#include "cuda/ops.cuh"
#include "cuda/reduce.cuh"

namespace trident::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;

// The row normalised: inp's, or with a residual (not null) the sum inp + residual, which the first pass
// forms and writes to sum (sum may be inp: the add in place) and the later passes read back, each lane
// its own columns (the fused residual add: no separate pass over the sum).
__device__ const float* row_input(const float* inp, const float* residual, float* sum, int64_t row, int64_t C) {
  return residual ? sum + row * C : inp + row * C;
}

__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp, const float* residual, float* sum,
                             const float* weight, const float* bias, int64_t N, int64_t C, double eps,
                             OutputRounding rounding) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= N) return;  // uniform per warp: the warp's shuffles below stay complete
  const float* x = row_input(inp, residual, sum, row, C);
  double s = 0.0;
  for (int64_t c = lane; c < C; c += 32) {
    if (residual) sum[row * C + c] = inp[row * C + c] + residual[row * C + c];
    s += x[c];
  }
  const double m = warp_sum(s) / double(C);
  double v = 0.0;
  for (int64_t c = lane; c < C; c += 32) {
    const double d = double(x[c]) - m;
    v += d * d;
  }
  const double var = warp_sum(v) / double(C);
  const double rs = 1.0 / sqrt(var + eps);
  float* y = out + row * C;
  for (int64_t c = lane; c < C; c += 32) {
    const float n = float((double(x[c]) - m) * rs);
    y[c] = rounding(n * weight[c] + bias[c], row * C + c);
  }
  if (lane == 0) {
    if (mean) mean[row] = float(m);
    if (rstd) rstd[row] = float(rs);
  }
}

// dinp += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = weight * dout, in double
// from the saved float mean and rstd, as the Kokkos backend does.
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    layernorm_backward_input_kernel(float* dinp, const float* dout, const float* inp, const float* weight,
                                    const float* mean, const float* rstd, int64_t N, int64_t C) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= N) return;
  const float* x = inp + row * C;
  const float* dy = dout + row * C;
  const double m = mean[row], rs = rstd[row];
  double dn_sum = 0.0, dn_n_sum = 0.0;
  for (int64_t c = lane; c < C; c += 32) {
    const double n = (double(x[c]) - m) * rs;
    const double dn = double(weight[c]) * double(dy[c]);
    dn_sum += dn;
    dn_n_sum += dn * n;
  }
  const double dn_mean = warp_sum(dn_sum) / double(C);
  const double dn_n_mean = warp_sum(dn_n_sum) / double(C);
  float* dx = dinp + row * C;
  for (int64_t c = lane; c < C; c += 32) {
    const double n = (double(x[c]) - m) * rs;
    const double dn = double(weight[c]) * double(dy[c]);
    dx[c] += float(rs * (dn - dn_mean - n * dn_n_mean));
  }
}

// Terms of dweight (acc[0] += norm * dout) and dbias (acc[1] += dout) for row r, column c.
struct LayerNormParamTerms {
  const float* dout;
  const float* inp;
  const float* mean;
  const float* rstd;
  int64_t C;
  __device__ void operator()(int64_t r, int64_t c, double* acc) const {
    const double dy = dout[r * C + c];
    const double n = (double(inp[r * C + c]) - double(mean[r])) * double(rstd[r]);
    acc[0] += n * dy;
    acc[1] += dy;
  }
};

// ---- RMSNorm ----
// rstd = 1 / sqrt(mean(inp^2) + eps) in double; out = float(inp * rstd) * weight.
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    rmsnorm_forward_kernel(float* out, float* rstd, const float* inp, const float* residual, float* sum,
                           const float* weight, int64_t N, int64_t C, double eps, OutputRounding rounding) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= N) return;  // uniform per warp
  const float* x = row_input(inp, residual, sum, row, C);
  double ss = 0.0;
  for (int64_t c = lane; c < C; c += 32) {
    if (residual) sum[row * C + c] = inp[row * C + c] + residual[row * C + c];
    ss += double(x[c]) * double(x[c]);
  }
  const double rs = 1.0 / sqrt(warp_sum(ss) / double(C) + eps);
  float* y = out + row * C;
  for (int64_t c = lane; c < C; c += 32) y[c] = rounding(float(double(x[c]) * rs) * weight[c], row * C + c);
  if (lane == 0 && rstd) rstd[row] = float(rs);
}

// dinp += rstd * (dnorm - norm * mean(dnorm * norm)), norm = inp * rstd, dnorm = weight * dout, in double.
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    rmsnorm_backward_input_kernel(float* dinp, const float* dout, const float* inp, const float* weight,
                                  const float* rstd, int64_t N, int64_t C) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= N) return;
  const float* x = inp + row * C;
  const float* dy = dout + row * C;
  const double rs = rstd[row];
  double dn_n_sum = 0.0;
  for (int64_t c = lane; c < C; c += 32) dn_n_sum += double(weight[c]) * double(dy[c]) * (double(x[c]) * rs);
  const double dn_n_mean = warp_sum(dn_n_sum) / double(C);
  float* dx = dinp + row * C;
  for (int64_t c = lane; c < C; c += 32) {
    const double n = double(x[c]) * rs;
    const double dn = double(weight[c]) * double(dy[c]);
    dx[c] += float(rs * (dn - n * dn_n_mean));
  }
}

// The term of dweight (acc[0] += norm * dout) for row r, column c.
struct RmsNormWeightTerm {
  const float* dout;
  const float* inp;
  const float* rstd;
  int64_t C;
  __device__ void operator()(int64_t r, int64_t c, double* acc) const {
    acc[0] += double(inp[r * C + c]) * double(rstd[r]) * double(dout[r * C + c]);
  }
};

}  // namespace

void layernorm_forward(cudaStream_t stream, float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int64_t N, int64_t C, float eps,
                       OutputRounding rounding) {
  if (N <= 0 || C <= 0) return;
  const unsigned blocks = unsigned(ceil_div(N, kWarpsPerBlock));
  TRIDENT_CUDA_CHECK(launch(layernorm_forward_kernel, blocks, kWarpsPerBlock * 32, 0, stream,
      out, mean, rstd, inp, static_cast<const float*>(nullptr), static_cast<float*>(nullptr), weight, bias, N, C,
      double(eps), rounding));
}

void residual_layernorm_forward(cudaStream_t stream, float* x, const float* residual, float* out, float* mean,
                                float* rstd, const float* weight, const float* bias, int64_t N, int64_t C, float eps,
                                OutputRounding rounding) {
  if (N <= 0 || C <= 0) return;
  const unsigned blocks = unsigned(ceil_div(N, kWarpsPerBlock));
  TRIDENT_CUDA_CHECK(launch(layernorm_forward_kernel, blocks, kWarpsPerBlock * 32, 0, stream,
      out, mean, rstd, static_cast<const float*>(x), residual, x, weight, bias, N, C, double(eps), rounding));
}

void layernorm_backward(cudaStream_t stream, DeviceAllocator& alloc, float* dinp, float* dweight, float* dbias,
                        const float* dout, const float* inp, const float* weight, const float* mean,
                        const float* rstd, int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return;
  if (dinp) {
    const unsigned blocks = unsigned(ceil_div(N, kWarpsPerBlock));
    TRIDENT_CUDA_CHECK(launch(layernorm_backward_input_kernel, blocks, kWarpsPerBlock * 32, 0, stream,
        dinp, dout, inp, weight, mean, rstd, N, C));
  }
  if (dweight || dbias) {
    float* const outs[2] = {dweight, dbias};
    column_sums<2>(stream, alloc, outs, LayerNormParamTerms{dout, inp, mean, rstd, C}, N, C);
  }
}

void rmsnorm_forward(cudaStream_t stream, float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                     int64_t C, float eps, OutputRounding rounding) {
  if (N <= 0 || C <= 0) return;
  const unsigned blocks = unsigned(ceil_div(N, kWarpsPerBlock));
  TRIDENT_CUDA_CHECK(launch(rmsnorm_forward_kernel, blocks, kWarpsPerBlock * 32, 0, stream,
      out, rstd, inp, static_cast<const float*>(nullptr), static_cast<float*>(nullptr), weight, N, C, double(eps),
      rounding));
}

void residual_rmsnorm_forward(cudaStream_t stream, float* x, const float* residual, float* out, float* rstd,
                              const float* weight, int64_t N, int64_t C, float eps, OutputRounding rounding) {
  if (N <= 0 || C <= 0) return;
  const unsigned blocks = unsigned(ceil_div(N, kWarpsPerBlock));
  TRIDENT_CUDA_CHECK(launch(rmsnorm_forward_kernel, blocks, kWarpsPerBlock * 32, 0, stream,
      out, rstd, static_cast<const float*>(x), residual, x, weight, N, C, double(eps), rounding));
}

void rmsnorm_backward(cudaStream_t stream, DeviceAllocator& alloc, float* dinp, float* dweight, const float* dout,
                      const float* inp, const float* weight, const float* rstd, int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return;
  if (dinp) {
    const unsigned blocks = unsigned(ceil_div(N, kWarpsPerBlock));
    TRIDENT_CUDA_CHECK(launch(rmsnorm_backward_input_kernel, blocks, kWarpsPerBlock * 32, 0, stream,
        dinp, dout, inp, weight, rstd, N, C));
  }
  if (dweight) {
    float* const outs[1] = {dweight};
    column_sums<1>(stream, alloc, outs, RmsNormWeightTerm{dout, inp, rstd, C}, N, C);
  }
}

}  // namespace trident::cuda
