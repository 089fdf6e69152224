#pragma once
// gpu-sim's stand-in for two PTX instructions of warp-level matrix work, which nvcc code reaches through
// inline asm (sm_80 and later; PTX ISA, "Warp Level Matrix Multiply-Accumulate Instructions"):
//   mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32   d, a, b, c;
//   ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16      {r0, r1, r2, r3}, [address];
//
// mma:
// D (16x8, fp32) = A (16x16, bf16) B (16x8, bf16) + C (16x8, fp32), one warp. Unlike WMMA's, this
// instruction's fragment layout is documented (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating
// point type"), so kernels may do row-wise work on the fragments in registers. Lane l, g = l / 4 (its
// group), t = l % 4 (its place in the group); a 32-bit register holds two bf16, the lower-numbered
// element in the low half:
//   A: a[0] = A[g][2t, 2t+1],  a[1] = A[g+8][2t, 2t+1],  a[2] = A[g][2t+8, 2t+9],  a[3] = A[g+8][2t+8, 2t+9]
//   B: b[0] = B[2t, 2t+1][g],  b[1] = B[2t+8, 2t+9][g]   (rows k, column n = g)
//   C, D: c[0], c[1] = C[g][2t, 2t+1],  c[2], c[3] = C[g+8][2t, 2t+1]
// A warp operation (gpusim::detail::warp_collective): all 32 lanes must reach it together, as
// mma.sync.aligned requires; a missing or diverged lane faults. The arithmetic is that of gpu-sim's WMMA
// mma_sync (mma.h): the 16 exact products of each dot product summed exactly, added to C and rounded once
// to fp32; tensor cores round their accumulation in an undocumented way (a GPU may differ in the last bits).
//
// ldmatrix: four 8x8 matrices of 16-bit elements from shared memory, one row of 8 elements (16 bytes,
// 16-byte aligned) per address: lanes 8m..8m+7 give the addresses of rows 0..7 of matrix m. Register m
// of lane l (g = l / 4, t = l % 4) receives matrix m's elements [g][2t], [g][2t+1], or with .trans the
// transposed matrix's, [2t][g], [2t+1][g] (low half first). A warp operation as mma; an address that is
// not 16-byte aligned faults.
#include <cstdint>
#include <cstring>
#include <string>

#include "gpusim/device_builtins.h"

namespace gpusim::ptx {

namespace detail {

struct MmaM16n8k16Lane {
  float* d;
  const uint32_t* a;
  const uint32_t* b;
  const float* c;
};

inline double bf16_half(uint32_t reg, int high) {
  const uint32_t bits = high ? (reg & 0xffff0000u) : (reg << 16);
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return double(f);
}

inline void complete_mma_m16n8k16(void* const* lanes) {
  double A[16][16], B[16][8];
  float C[16][8], D[16][8];
  for (int l = 0; l < 32; ++l) {
    const auto& in = *static_cast<const MmaM16n8k16Lane*>(lanes[l]);
    const int g = l / 4, t = l % 4;
    for (int h = 0; h < 2; ++h) {
      A[g][2 * t + h] = bf16_half(in.a[0], h);
      A[g + 8][2 * t + h] = bf16_half(in.a[1], h);
      A[g][2 * t + 8 + h] = bf16_half(in.a[2], h);
      A[g + 8][2 * t + 8 + h] = bf16_half(in.a[3], h);
      B[2 * t + h][g] = bf16_half(in.b[0], h);
      B[2 * t + 8 + h][g] = bf16_half(in.b[1], h);
      C[g][2 * t + h] = in.c[h];
      C[g + 8][2 * t + h] = in.c[2 + h];
    }
  }
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      double dot = 0.0;  // exact: 16 products of 8-bit significands
      for (int k = 0; k < 16; ++k) dot += A[i][k] * B[k][j];
      D[i][j] = float(double(C[i][j]) + dot);
    }
  for (int l = 0; l < 32; ++l) {  // written after every lane's inputs were read: d may alias c
    float* d = static_cast<const MmaM16n8k16Lane*>(lanes[l])->d;
    const int g = l / 4, t = l % 4;
    d[0] = D[g][2 * t];
    d[1] = D[g][2 * t + 1];
    d[2] = D[g + 8][2 * t];
    d[3] = D[g + 8][2 * t + 1];
  }
}

struct LdmatrixLane {
  uint32_t* r;
  const void* row;
  bool trans;
};

inline void complete_ldmatrix_x4(void* const* lanes) {
  const bool trans = static_cast<const LdmatrixLane*>(lanes[0])->trans;
  uint16_t M[4][8][8];
  for (int l = 0; l < 32; ++l) {
    const auto& in = *static_cast<const LdmatrixLane*>(lanes[l]);
    if (in.trans != trans) ::gpusim::detail::trap("ldmatrix: lanes disagree on .trans (the whole warp must make the same call)");
    if (reinterpret_cast<uintptr_t>(in.row) % 16 != 0)
      ::gpusim::detail::trap(("ldmatrix: lane " + std::to_string(l) + "'s row address is not 16-byte aligned").c_str());
    std::memcpy(M[l / 8][l % 8], in.row, sizeof M[0][0]);
  }
  for (int l = 0; l < 32; ++l) {
    uint32_t* r = static_cast<const LdmatrixLane*>(lanes[l])->r;
    const int g = l / 4, t = l % 4;
    for (int m = 0; m < 4; ++m) {
      const uint16_t lo = trans ? M[m][2 * t][g] : M[m][g][2 * t];
      const uint16_t hi = trans ? M[m][2 * t + 1][g] : M[m][g][2 * t + 1];
      r[m] = uint32_t(lo) | (uint32_t(hi) << 16);
    }
  }
}

}  // namespace detail

// r = the calling lane's registers of ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16 (above); `row` is
// the address this lane gives.
inline void ldmatrix_x4(uint32_t (&r)[4], const void* row, bool trans) {
  detail::LdmatrixLane lane{r, row, trans};
  ::gpusim::detail::warp_collective(trans ? "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"
                                          : "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                                    &lane, detail::complete_ldmatrix_x4);
}

// d = a b + c for the calling lane's fragments (layout above); d may be c.
inline void mma_m16n8k16_bf16_f32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                  const float (&c)[4]) {
  detail::MmaM16n8k16Lane lane{d, a, b, c};
  ::gpusim::detail::warp_collective("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", &lane,
                                    detail::complete_mma_m16n8k16);
}

}  // namespace gpusim::ptx
