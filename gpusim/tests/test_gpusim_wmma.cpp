// gpu-sim's WMMA (mma.h, cuda_bf16.h): bfloat16 conversion, loads and stores in both layouts with
// padded leading dimensions, mma_sync against a double product of operands rounded to bf16 by this
// file's own arithmetic, accumulation, and the faults for what a GPU requires (alignment, ldm, the
// whole warp making the same call, fragments that only layout-free code touched). Tests that fault a
// device use a device of their own (a fault is sticky for the rest of the process).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <mma.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "device_arrays.hpp"

namespace {

using namespace nvcuda;

using gpusim_test::device_array;
using gpusim_test::launch;
using gpusim_test::to_device;
using gpusim_test::to_host;

// x rounded to bfloat16, to nearest, ties to even (nearbyint's default mode): to 8 significant bits,
// or for denormals (below 2^-126) to a multiple of bf16's smallest denormal, 2^-133.
double round_bf16(double x) {
  int e = 0;
  std::frexp(x, &e);  // x = m 2^e, 0.5 <= |m| < 1
  const int quantum = std::max(e - 8, -133);
  return std::ldexp(std::nearbyint(std::ldexp(x, -quantum)), quantum);
}

std::vector<float> random_values(size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// ---- bfloat16 ----

__global__ void convert_round_trip(float* out, const float* in, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = __bfloat162float(__float2bfloat16_rn(in[i]));
}

TEST(GpuSimWmma, Bf16ConversionRoundsToNearestEven) {
  std::vector<float> in = random_values(1000, 1, 3.0f);
  const float tie_down = 1.0f + 0x1p-8f, tie_up = 1.0f + 3 * 0x1p-8f;  // halfway: to the even neighbour
  in.insert(in.end(), {tie_down, tie_up, -tie_up, 0.0f, -0.0f, INFINITY, 3.4e38f, 1e-40f});
  float* d_in = to_device(in);
  float* d_out = device_array<float>(in.size());
  ASSERT_EQ(launch(convert_round_trip, 1, 64, 0, d_out, d_in, int(in.size())), cudaSuccess);
  const auto out = to_host(d_out, in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const double expected = std::isinf(in[i]) || std::fabs(in[i]) > 3.3961e38 ? std::copysign(INFINITY, in[i])
                                                                               : round_bf16(in[i]);
    EXPECT_EQ(double(out[i]), expected) << "input " << in[i];
  }
  EXPECT_EQ(out[1000], 1.0f);
  EXPECT_EQ(out[1001], 1.0f + 4 * 0x1p-8f);
  cudaFree(d_in);
  cudaFree(d_out);
}

// ---- mma ----

// D = A B + C, then (when twice) D = A B + D. A [16x16] and B [16x16] are floats in memory in the
// fragments' layouts (leading dimension 16), converted to bf16 in shared memory; C row-major.
template <class LayoutA, class LayoutB>
__global__ void mma_tile(float* d, const float* a, const float* b, const float* c, bool twice) {
  __shared__ __align__(32) __nv_bfloat16 as[256];
  __shared__ __align__(32) __nv_bfloat16 bs[256];
  for (int i = threadIdx.x; i < 256; i += 32) {
    as[i] = __float2bfloat16_rn(a[i]);
    bs[i] = __float2bfloat16_rn(b[i]);
  }
  __syncwarp();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, LayoutA> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, LayoutB> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::load_matrix_sync(fa, as, 16);
  wmma::load_matrix_sync(fb, bs, 16);
  wmma::load_matrix_sync(acc, c, 16, wmma::mem_row_major);
  wmma::mma_sync(acc, fa, fb, acc);
  if (twice) wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);
}

template <class LayoutA, class LayoutB>
void check_mma(bool a_col_major, bool b_col_major, bool twice, unsigned seed) {
  const auto A = random_values(256, seed), B = random_values(256, seed + 1), C = random_values(256, seed + 2, 4.0f);
  // Memory images in the fragments' layouts: element (r, k) of A at r*16+k (row) or k*16+r (col).
  std::vector<float> a_mem(256), b_mem(256);
  for (int r = 0; r < 16; ++r)
    for (int k = 0; k < 16; ++k) {
      a_mem[a_col_major ? k * 16 + r : r * 16 + k] = A[r * 16 + k];
      b_mem[b_col_major ? k * 16 + r : r * 16 + k] = B[r * 16 + k];  // B element (r = k index, k = n index)
    }
  float *da = to_device(a_mem), *db = to_device(b_mem), *dc = to_device(C);
  float* dd = device_array<float>(256);
  ASSERT_EQ(launch(mma_tile<LayoutA, LayoutB>, 1, 32, 0, dd, (const float*)da, (const float*)db, (const float*)dc,
                   twice),
            cudaSuccess);
  const auto D = to_host(dd, 256);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      double dot = 0.0, magnitude = 0.0;
      for (int k = 0; k < 16; ++k) {
        const double p = round_bf16(A[i * 16 + k]) * round_bf16(B[k * 16 + j]);
        dot += p;
        magnitude += std::fabs(p);
      }
      const double c = C[i * 16 + j];
      const double expected = twice ? c + 2 * dot : c + dot;
      // One fp32 rounding per mma (exact products and sums): half an ulp, 2^-24 relative, of each
      // result; twice: the first result's rounding is carried into the second.
      const double bound = twice ? 0x1p-24 * (2 * (std::fabs(c) + 2 * magnitude)) : 0x1p-24 * std::fabs(expected);
      EXPECT_LE(std::fabs(D[i * 16 + j] - expected), bound) << "(" << i << "," << j << ")";
      // The rounding of the operands matters: the fp32 product differs by more (so a path that did not
      // round would fail). Checked on the whole tile below.
    }
  double unrounded_error = 0.0, limit = 0.0;
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      double exact = C[i * 16 + j];
      for (int k = 0; k < 16; ++k) exact += (twice ? 2.0 : 1.0) * double(A[i * 16 + k]) * double(B[k * 16 + j]);
      unrounded_error = std::max(unrounded_error, std::fabs(D[i * 16 + j] - exact));
      limit = std::max(limit, 0x1p-24 * 4 * std::fabs(exact));
    }
  EXPECT_GT(unrounded_error, 100 * limit) << "the operands were not rounded to bf16";
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  cudaFree(dd);
}

TEST(GpuSimWmma, MmaEqualsTheDoubleProductOfBf16RoundedOperands) {
  check_mma<wmma::row_major, wmma::col_major>(false, true, false, 10);
  check_mma<wmma::row_major, wmma::row_major>(false, false, false, 20);
  check_mma<wmma::col_major, wmma::col_major>(true, true, false, 30);
  check_mma<wmma::col_major, wmma::row_major>(true, false, false, 40);
}

TEST(GpuSimWmma, MmaAccumulatesIntoTheAccumulator) {
  check_mma<wmma::row_major, wmma::col_major>(false, true, true, 50);
  check_mma<wmma::col_major, wmma::row_major>(true, false, true, 60);
}

// ---- loads and stores ----

// Each of the block's warps w loads the accumulator tile at src + w*16 (leading dimension ld_in, in
// layout_in: the offset moves along its columns when row-major, its rows when col-major), scales it by 2 (a layout-free element-wise operation) and stores it at dst + w*16*ld_out
// in layout_out.
__global__ void copy_tiles(float* dst, const float* src, unsigned ld_in, bool col_in, unsigned ld_out, bool col_out) {
  const int w = threadIdx.x / 32;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> f;
  wmma::load_matrix_sync(f, src + w * 16, ld_in, col_in ? wmma::mem_col_major : wmma::mem_row_major);
  for (int i = 0; i < f.num_elements; ++i) f.x[i] *= 2.0f;
  wmma::store_matrix_sync(dst + w * 16 * ld_out, f, ld_out, col_out ? wmma::mem_col_major : wmma::mem_row_major);
}

TEST(GpuSimWmma, AccumulatorLoadsAndStoresInBothLayoutsWithPaddedRows) {
  const unsigned ld_in = 40, ld_out = 20;  // two tiles side by side in the source; padding in both
  for (bool col_in : {false, true})
    for (bool col_out : {false, true}) {
      const auto src = random_values(ld_in * 32, 7);
      float* dsrc = to_device(src);
      std::vector<float> sentinel(2 * 16 * ld_out, -7.0f);
      float* ddst = to_device(sentinel);
      ASSERT_EQ(launch(copy_tiles, 1, 64, 0, ddst, (const float*)dsrc, ld_in, col_in, ld_out, col_out), cudaSuccess);
      const auto dst = to_host(ddst, sentinel.size());
      for (int w = 0; w < 2; ++w)
        for (int r = 0; r < 16; ++r)
          for (int c = 0; c < 16; ++c) {
            const float v = col_in ? src[c * ld_in + w * 16 + r] : src[r * ld_in + w * 16 + c];
            const size_t at = w * 16 * ld_out + (col_out ? c * ld_out + r : r * ld_out + c);
            ASSERT_EQ(dst[at], 2.0f * v) << "warp " << w << " (" << r << "," << c << ") in " << col_in << col_out;
          }
      for (int w = 0; w < 2; ++w)
        for (unsigned k = 16; k < ld_out; ++k)
          for (int r = 0; r < 16; ++r) EXPECT_EQ(dst[w * 16 * ld_out + r * ld_out + k], -7.0f) << "padding written";
      cudaFree(dsrc);
      cudaFree(ddst);
    }
}

// B loaded row-major from rows of 24 bf16 and col-major from the same memory is its transpose.
__global__ void product_with_both_layouts(float* d, const float* a) {
  __shared__ __align__(32) __nv_bfloat16 s[16 * 24];
  for (int i = threadIdx.x; i < 16 * 24; i += 32) s[i] = __float2bfloat16_rn(a[i]);
  __syncwarp();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  wmma::load_matrix_sync(fa, s, 24);
  wmma::load_matrix_sync(fb, s, 24);
  wmma::mma_sync(acc, fa, fb, acc);  // M M^T
  wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);
}

TEST(GpuSimWmma, ColMajorBOfRowMajorMemoryIsTheTranspose) {
  const auto m = random_values(16 * 24, 9);
  float* dm = to_device(m);
  float* dd = device_array<float>(256);
  ASSERT_EQ(launch(product_with_both_layouts, 1, 32, 0, dd, (const float*)dm), cudaSuccess);
  const auto d = to_host(dd, 256);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      double e = 0.0;
      for (int k = 0; k < 16; ++k) e += round_bf16(m[i * 24 + k]) * round_bf16(m[j * 24 + k]);
      EXPECT_LE(std::fabs(d[i * 16 + j] - e), 0x1p-24 * std::fabs(e)) << i << "," << j;
    }
  cudaFree(dm);
  cudaFree(dd);
}

// ---- faults: each on a device of its own; the message names the rule ----

class WmmaFault : public ::testing::Test {
 protected:
  void use_device(int d) { ASSERT_EQ(cudaSetDevice(d), cudaSuccess); }
  void TearDown() override { cudaSetDevice(0); }
  // Runs the launch, expects the device's sticky launch failure and a message containing `what`.
  template <class F>
  void expect_fault(F launch_it, const std::string& what) {
    testing::internal::CaptureStderr();
    ASSERT_EQ(launch_it(), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
    const std::string log = testing::internal::GetCapturedStderr();
    EXPECT_NE(log.find(what), std::string::npos) << "expected \"" << what << "\" in: " << log;
    EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure) << "a device fault is sticky";
  }
};

// Loads an A tile from `offset` elements into a shared array with rows of `ldm`, then stores the
// product with itself at `out + out_offset` with leading dimension out_ldm.
__global__ void load_and_store(float* out, int offset, unsigned ldm, int out_offset, unsigned out_ldm) {
  __shared__ __align__(32) __nv_bfloat16 s[64 * 24];
  for (int i = threadIdx.x; i < 64 * 24; i += blockDim.x) s[i] = __float2bfloat16_rn(1.0f);
  __syncwarp();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  wmma::load_matrix_sync(fa, s + offset, ldm);
  wmma::load_matrix_sync(fb, s, 24);
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(out + out_offset, acc, out_ldm, wmma::mem_row_major);
}

TEST_F(WmmaFault, AGoodCallDoesNotFault) {
  float* out = device_array<float>(64 * 64);
  ASSERT_EQ(launch(load_and_store, 1, 32, 0, out, 16, 24u, 8, 20u), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(to_host(out, 64 * 64)[8], 16.0f);
  cudaFree(out);
}

TEST_F(WmmaFault, AMisalignedPointerFaults) {
  use_device(1);
  float* out = device_array<float>(64 * 64);
  expect_fault([&] { return launch(load_and_store, 1, 32, 0, out, 8, 24u, 0, 16u); },  // 16 bytes in
               "load_matrix_sync: pointer");
}

TEST_F(WmmaFault, AMisalignedStoreFaults) {
  use_device(2);
  float* out = device_array<float>(64 * 64);
  expect_fault([&] { return launch(load_and_store, 1, 32, 0, out, 0, 24u, 4, 16u); }, "32-byte");
}

TEST_F(WmmaFault, ALeadingDimensionNotAMultipleOf8Bf16Faults) {
  use_device(3);
  float* out = device_array<float>(64 * 64);
  expect_fault([&] { return launch(load_and_store, 1, 32, 0, out, 0, 20u, 0, 16u); }, "ldm 20");
}

TEST_F(WmmaFault, ALeadingDimensionNotAMultipleOf4FloatsFaults) {
  use_device(4);
  float* out = device_array<float>(64 * 64);
  expect_fault([&] { return launch(load_and_store, 1, 32, 0, out, 0, 24u, 0, 18u); }, "ldm 18");
}

__global__ void half_warp_loads(float* out) {
  __shared__ __align__(32) __nv_bfloat16 s[256];
  for (int i = threadIdx.x; i < 256; i += blockDim.x) s[i] = __float2bfloat16_rn(1.0f);
  __syncwarp();
  if (threadIdx.x >= 16) return;  // diverged: the other half never joins
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
  wmma::load_matrix_sync(fa, s, 16);
  out[threadIdx.x] = __bfloat162float(fa.x[0]);
}

TEST_F(WmmaFault, HalfAWarpCallingFaults) {
  use_device(5);
  float* out = device_array<float>(32);
  // Which message depends on the thread order: the waiting lanes see the others exit, or they are the
  // ones that find the others gone.
  expect_fault([&] { return launch(half_warp_loads, 1, 32, 0, out); }, "exited");
}

__global__ void lanes_pass_different_rows(float* out) {
  __shared__ __align__(32) __nv_bfloat16 s[32 * 16];
  for (int i = threadIdx.x; i < 32 * 16; i += blockDim.x) s[i] = __float2bfloat16_rn(1.0f);
  __syncwarp();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
  wmma::load_matrix_sync(fa, s + (threadIdx.x / 16) * 256, 16);  // divergent arguments
  out[threadIdx.x] = __bfloat162float(fa.x[0]);
}

TEST_F(WmmaFault, LanesPassingDifferentPointersFault) {
  use_device(6);
  float* out = device_array<float>(32);
  expect_fault([&] { return launch(lanes_pass_different_rows, 1, 32, 0, out); }, "another pointer");
}

__global__ void layout_dependent_update(float* out) {
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  acc.x[threadIdx.x] = 1.0f;  // means "some element of the lane's share" on a GPU: layout-dependent
  wmma::store_matrix_sync(out, acc, 16, wmma::mem_row_major);
}

TEST_F(WmmaFault, LaneDependentFragmentElementsFault) {
  use_device(7);
  float* out = device_array<float>(256);
  expect_fault([&] { return launch(layout_dependent_update, 1, 32, 0, out); }, "differs from lane 0's");
}

__global__ void mma_in_partial_warp(float* out) {
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 1.0f);
  wmma::store_matrix_sync(out, acc, 16, wmma::mem_row_major);
}

TEST_F(WmmaFault, APartialWarpFaults) {
  use_device(8);  // the entry sets GPUSIM_GPUS_PER_NODE=10
  float* out = device_array<float>(256);
  expect_fault([&] { return launch(mma_in_partial_warp, 1, 16, 0, out); }, "lanes the block does not have");
}

}  // namespace
