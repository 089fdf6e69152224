#pragma once
// A warp's tensor-core product on registers: PTX mma.sync m16n8k16 with bf16 operands and fp32
// accumulators (sm_80 and later), whose fragment layout PTX documents, so that a kernel can keep a
// product in registers and work on its rows there (attention's softmax; WMMA's layout is opaque). nvcc
// runs the instruction through inline asm; gpu-sim (a host compiler: no __CUDACC__) through its
// emulation of it, gpusim/include/gpusim/ptx_mma.h, which states the layout. Lane l, g = l / 4,
// t = l % 4; a 32-bit register holds two bf16, the lower-numbered element in its low half:
//   A (16x16): a[0] = A[g][2t..], a[1] = A[g+8][2t..], a[2] = A[g][2t+8..], a[3] = A[g+8][2t+8..]
//   B (16x8):  b[0] = B[2t..][g], b[1] = B[2t+8..][g]
//   C (16x8):  c[0], c[1] = C[g][2t], C[g][2t+1];  c[2], c[3] = C[g+8][2t], C[g+8][2t+1]
// So the C fragments of two 8-column neighbours, (c[0], c[1]), (c[2], c[3]) of the left one and then
// of the right one, are the four registers of an A fragment of their 16 columns (to_a_fragment): a
// product's output feeds the next product without leaving registers.
// ldmatrix (x4, optionally .trans) loads four 8x8 blocks of a tile in shared memory into such fragments,
// transposing them on the way where a B operand is stored with its k index down the rows.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/bf16.cuh"

#if !defined(__CUDACC__)
#include <gpusim/ptx_mma.h>
#endif

namespace trident::cuda {

using MmaA = uint32_t[4];     // a 16x16 bf16 A fragment
using MmaB = uint32_t[2];     // a 16x8 bf16 B fragment
using MmaAccum = float[4];    // a 16x8 fp32 C/D fragment

// d += a b.
__device__ inline void mma_bf16(MmaAccum& d, const MmaA& a, const MmaB& b) {
#if defined(__CUDACC__)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  gpusim::ptx::mma_m16n8k16_bf16_f32(d, a, b, d);
#endif
}

// bf16(lo) in the low half, bf16(hi) in the high half, each rounded to nearest even (nvcc: one cvt.rn.bf16x2
// instruction; the same bits as bf16_bits for every number, a NaN stays a NaN).
__device__ inline uint32_t pack_bf16x2(float lo, float hi) {
#if defined(__CUDACC__)
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&pair);
#else
  return uint32_t(bf16_bits(lo)) | (uint32_t(bf16_bits(hi)) << 16);
#endif
}

// r = ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16 from the row address `row` that this lane gives
// (16-byte aligned, in shared memory): lanes 8m..8m+7 give the rows of 8x8 block m, register m receives
// block m's elements [g][2t, 2t+1] (kTrans: [2t, 2t+1][g]).
template <bool kTrans>
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const __nv_bfloat16* row) {
#if defined(__CUDACC__)
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  if constexpr (kTrans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
#else
  gpusim::ptx::ldmatrix_x4(r, row, kTrans);
#endif
}

// The tiles below are in shared memory, row-major with a row stride of ld elements, every row 16-byte
// aligned; each load is one ldmatrix of four 8x8 blocks.

// A fragment of the 16x16 block at a: blocks rows [0, 8) and [8, 16) of columns [0, 8), then of [8, 16).
__device__ inline void load_a_fragment(MmaA& f, const __nv_bfloat16* a, int ld) {
  const int lane = int(threadIdx.x) % 32, block = lane / 8;
  ldmatrix_x4<false>(f, a + ((block & 1) * 8 + lane % 8) * ld + (block >> 1) * 8);
}

// B fragments of two 16x8 blocks, B = rows^T: column n of the left one is row n of `rows`, of the right
// one row 8 + n, the k index running along a row (columns [0, 16)).
__device__ inline void load_b_fragment_pair_of_transpose(MmaB& left, MmaB& right, const __nv_bfloat16* rows,
                                                         int ld) {
  const int lane = int(threadIdx.x) % 32, block = lane / 8;
  uint32_t r[4];
  ldmatrix_x4<false>(r, rows + ((block >> 1) * 8 + lane % 8) * ld + (block & 1) * 8);
  left[0] = r[0];
  left[1] = r[1];
  right[0] = r[2];
  right[1] = r[3];
}

// B fragments of the two 16x8 blocks side by side, columns [0, 8) and [8, 16), of B stored row-major at b
// in shared memory (row k, row stride ld elements; every row 16-byte aligned): one ldmatrix.trans, whose
// blocks are rows [0, 8) and [8, 16) of the left columns, then of the right ones.
__device__ inline void load_b_fragment_pair(MmaB& left, MmaB& right, const __nv_bfloat16* b, int ld) {
  const int lane = int(threadIdx.x) % 32, block = lane / 8;
  uint32_t r[4];
  ldmatrix_x4<true>(r, b + ((block & 1) * 8 + lane % 8) * ld + (block >> 1) * 8);
  left[0] = r[0];
  left[1] = r[1];
  right[0] = r[2];
  right[1] = r[3];
}

// The A fragment (rounded to bf16) of the 16x16 block made of two 16x8 accumulators side by side.
__device__ inline void to_a_fragment(MmaA& a, const MmaAccum& left, const MmaAccum& right) {
  a[0] = pack_bf16x2(left[0], left[1]);
  a[1] = pack_bf16x2(left[2], left[3]);
  a[2] = pack_bf16x2(right[0], right[1]);
  a[3] = pack_bf16x2(right[2], right[3]);
}

}  // namespace trident::cuda
