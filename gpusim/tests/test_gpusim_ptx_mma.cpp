// gpu-sim's PTX warp-matrix instructions (gpusim/ptx_mma.h): mma.sync m16n8k16 (bf16 x bf16 + fp32)
// and ldmatrix m8n8.x4 with and without .trans, checked against the fragment layouts as the PTX ISA
// tabulates them, written here the other way round (from a matrix element to the lane, register and
// half that hold it); the product against a double computation; the faults (a lane missing, a
// misaligned ldmatrix row). A fault is sticky: fault tests use a device of their own.
#include <cuda_runtime.h>
#include <gpusim/ptx_mma.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "device_arrays.hpp"

namespace {

using gpusim_test::device_array;
using gpusim_test::launch;
using gpusim_test::to_device;
using gpusim_test::to_host;

// Where an element lives in a fragment: lane, register, half (0: low 16 bits).
struct Slot {
  int lane, reg, half;
};
// The PTX ISA's tables for m16n8k16 with .bf16, from the element's side.
Slot a_slot(int row, int col) { return {(row % 8) * 4 + (col % 8) / 2, row / 8 + 2 * (col / 8), col % 2}; }
Slot b_slot(int k, int n) { return {n * 4 + (k % 8) / 2, k / 8, k % 2}; }
Slot c_slot(int row, int col) { return {(row % 8) * 4 + col / 2, 2 * (row / 8) + col % 2, 0}; }
// ldmatrix m8n8: matrix element (r, c) is in lane 4r + c/2, half c%2 (of the matrix's register); with
// .trans the element (r, c) of the transposed matrix is, i.e. stored element (c, r).
Slot ldmatrix_slot(int r, int c) { return {4 * r + c / 2, 0, c % 2}; }

uint16_t bf16_bits_of(double x) {  // x is representable in bf16 (the tests make it so)
  const float f = float(x);
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  EXPECT_EQ(u & 0xffffu, 0u) << x << " is not a bf16 value";
  return uint16_t(u >> 16);
}

void put(std::vector<uint32_t>& regs, int regs_per_lane, Slot s, uint16_t bits) {
  uint32_t& r = regs[size_t(s.lane) * regs_per_lane + s.reg];
  r = s.half ? (r & 0x0000ffffu) | (uint32_t(bits) << 16) : (r & 0xffff0000u) | bits;
}

// Random values with 8 significant bits (bf16 values), of mixed magnitude.
std::vector<double> bf16_values(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> mantissa(128, 255), exponent(-6, 3), sign(0, 1);
  std::vector<double> v(n);
  for (double& x : v) x = (sign(rng) ? -1.0 : 1.0) * std::ldexp(mantissa(rng), exponent(rng) - 8);
  return v;
}

// Each lane: d = a b + c from its registers (a: 4, b: 2, c: 4 per lane), `times` times (accumulating
// in place after the first).
__global__ void mma_from_registers(float* d, const uint32_t* a, const uint32_t* b, const float* c, int times) {
  const int l = threadIdx.x;
  uint32_t ra[4], rb[2];
  float acc[4];
  for (int i = 0; i < 4; ++i) ra[i] = a[l * 4 + i];
  for (int i = 0; i < 2; ++i) rb[i] = b[l * 2 + i];
  for (int i = 0; i < 4; ++i) acc[i] = c[l * 4 + i];
  for (int n = 0; n < times; ++n) gpusim::ptx::mma_m16n8k16_bf16_f32(acc, ra, rb, acc);
  for (int i = 0; i < 4; ++i) d[l * 4 + i] = acc[i];
}

struct MmaCase {
  std::vector<double> A, B, C;  // 16x16, 16x8, 16x8 row-major
  std::vector<uint32_t> a, b;
  std::vector<float> c;
};

MmaCase make_case(unsigned seed) {
  MmaCase m;
  m.A = bf16_values(256, seed);
  m.B = bf16_values(128, seed + 1);
  m.C = bf16_values(128, seed + 2);
  m.a.assign(32 * 4, 0);
  m.b.assign(32 * 2, 0);
  m.c.assign(32 * 4, 0.0f);
  for (int r = 0; r < 16; ++r)
    for (int k = 0; k < 16; ++k) put(m.a, 4, a_slot(r, k), bf16_bits_of(m.A[r * 16 + k]));
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 8; ++n) put(m.b, 2, b_slot(k, n), bf16_bits_of(m.B[k * 8 + n]));
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) {
      const Slot s = c_slot(r, n);
      m.c[s.lane * 4 + s.reg] = float(m.C[r * 8 + n]);
    }
  return m;
}

std::vector<float> run_mma(const MmaCase& m, int times) {
  float* d = device_array<float>(128);
  uint32_t* a = to_device(m.a);
  uint32_t* b = to_device(m.b);
  float* c = to_device(m.c);
  EXPECT_EQ(launch(mma_from_registers, 1, 32, 0, d, (const uint32_t*)a, (const uint32_t*)b, (const float*)c, times),
            cudaSuccess);
  return to_host(d, 128);
}

TEST(GpuSimPtxMma, MmaEqualsTheDoubleProductInThePtxLayout) {
  const MmaCase m = make_case(3);
  const auto d = run_mma(m, 1);
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) {
      double e = m.C[r * 8 + n];
      for (int k = 0; k < 16; ++k) e += m.A[r * 16 + k] * m.B[k * 8 + n];
      const Slot s = c_slot(r, n);
      EXPECT_LE(std::fabs(d[s.lane * 4 + s.reg] - e), 0x1p-24 * std::fabs(e)) << "D[" << r << "][" << n << "]";
    }
}

TEST(GpuSimPtxMma, MmaInPlaceAccumulates) {
  const MmaCase m = make_case(11);
  const auto d = run_mma(m, 3);  // C + 3 A B, each step rounded to fp32
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) {
      double dot = 0.0;
      for (int k = 0; k < 16; ++k) dot += m.A[r * 16 + k] * m.B[k * 8 + n];
      float e = float(m.C[r * 8 + n]);
      for (int i = 0; i < 3; ++i) e = float(double(e) + dot);
      const Slot s = c_slot(r, n);
      EXPECT_EQ(d[s.lane * 4 + s.reg], e) << "D[" << r << "][" << n << "]";
    }
}

// A 32-row tile of 24 uint16 (16 used, 8 padding), element (r, c) = 1000 + 32 r + c. Lane l gives row
// (l % 8) + 8 (l / 8 % 2) at column 8 (l / 16): matrices 0..3 are the tile's 8x8 blocks (rows 0-7, cols
// 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15).
__global__ void ldmatrix_blocks(uint32_t* out, bool trans) {
  __shared__ __align__(16) uint16_t tile[32 * 24];
  for (int i = threadIdx.x; i < 32 * 24; i += 32) tile[i] = uint16_t(1000 + 32 * (i / 24) + i % 24);
  __syncwarp();
  const int l = threadIdx.x;
  uint32_t r[4];
  gpusim::ptx::ldmatrix_x4(r, tile + ((l % 8) + 8 * (l / 8 % 2)) * 24 + 8 * (l / 16), trans);
  for (int i = 0; i < 4; ++i) out[l * 4 + i] = r[i];
}

TEST(GpuSimPtxMma, LdmatrixHandsOutEachBlockInThePtxLayout) {
  for (bool trans : {false, true}) {
    uint32_t* d = device_array<uint32_t>(128);
    ASSERT_EQ(launch(ldmatrix_blocks, 1, 32, 0, d, trans), cudaSuccess);
    const auto regs = to_host(d, 128);
    for (int m = 0; m < 4; ++m)
      for (int r = 0; r < 8; ++r)
        for (int c = 0; c < 8; ++c) {
          const int row = 8 * (m % 2) + (trans ? c : r), col = 8 * (m / 2) + (trans ? r : c);
          const Slot s = ldmatrix_slot(r, c);
          const uint32_t reg = regs[s.lane * 4 + m];
          EXPECT_EQ(s.half ? reg >> 16 : reg & 0xffffu, uint32_t(1000 + 32 * row + col))
              << (trans ? "trans " : "") << "matrix " << m << " (" << r << "," << c << ")";
        }
  }
}

// ---- faults: each on a device of its own; the message names the rule ----

class PtxMmaFault : public ::testing::Test {
 protected:
  void use_device(int d) { ASSERT_EQ(cudaSetDevice(d), cudaSuccess); }
  void TearDown() override { cudaSetDevice(0); }
  template <class F>
  void expect_fault(F launch_it, const std::string& what) {
    testing::internal::CaptureStderr();
    ASSERT_EQ(launch_it(), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
    const std::string log = testing::internal::GetCapturedStderr();
    EXPECT_NE(log.find(what), std::string::npos) << "expected \"" << what << "\" in: " << log;
  }
};

__global__ void half_warp_mma(float* out) {
  if (threadIdx.x >= 16) return;  // diverged: the other half never joins
  const uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
  float acc[4] = {0, 0, 0, 0};
  gpusim::ptx::mma_m16n8k16_bf16_f32(acc, a, b, acc);
  out[threadIdx.x] = acc[0];
}

TEST_F(PtxMmaFault, HalfAWarpCallingMmaFaults) {
  use_device(1);
  float* out = device_array<float>(32);
  expect_fault([&] { return launch(half_warp_mma, 1, 32, 0, out); }, "exited");
}

__global__ void misaligned_ldmatrix(uint32_t* out) {
  __shared__ __align__(16) uint16_t tile[16 * 24];
  for (int i = threadIdx.x; i < 16 * 24; i += 32) tile[i] = 1;
  __syncwarp();
  uint32_t r[4];
  gpusim::ptx::ldmatrix_x4(r, tile + (threadIdx.x % 16) * 24 + 4, false);  // 8 bytes into a row
  out[threadIdx.x] = r[0];
}

TEST_F(PtxMmaFault, AMisalignedLdmatrixRowFaults) {
  use_device(2);
  uint32_t* out = device_array<uint32_t>(32);
  expect_fault([&] { return launch(misaligned_ldmatrix, 1, 32, 0, out); }, "16-byte aligned");
}

}  // namespace
