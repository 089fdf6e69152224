#pragma once
// The operands of the linear layers' GEMMs (Kernels::matmul_forward/backward; deck key
// train.matmul_precision): exact fp32, or each element of both operands rounded (to nearest, ties to
// even) to TF32 (11 significant bits) or bfloat16 (8), the products summed in fp32 and the result in
// fp32: PyTorch's float32 matmul precision "highest", "high" and "medium". CUDA runs them on tensor
// cores (cuBLASLt CUBLAS_COMPUTE_32F_FAST_TF32 / _FAST_16BF); the Kokkos backend rounds copies of the
// operands and calls sgemm, so the CPU computes the same numbers up to the order of the fp32 sums.
// BF16 also rounds attention's operands at head sizes 64 and 128 (kernels.hpp attention_follows_bf16;
// CUDA: tensor-core flash attention); norms, the loss and the optimizer stay fp32.
#include <algorithm>
#include <cstdint>

namespace trident {

enum class MatmulPrecision { FP32, TF32, BF16 };

// The output features per panel of a GEMM out[N,OC] = inp[N,IC] W[OC,IC]^T below fp32 on the Kokkos
// backend, whose rounded operand copies would otherwise include the whole weight and, in backward, the
// whole [N,OC] dout: the LM head's vocabulary makes those the largest buffers of a bf16 step. All OC
// while a panel's copies (OC x (N + IC) floats: dout's columns and the weight's rows, or forward's
// product and the weight's rows) stay within 16 MiB, else as many as fit, at least 1024 (GEMMs stay wide).
inline int64_t rounded_gemm_panel(int64_t N, int64_t IC, int64_t OC) {
  constexpr int64_t kPanelFloats = int64_t(1) << 22, kMinPanel = 1024;
  if (OC * (N + IC) <= kPanelFloats) return OC;
  return std::min(OC, std::max(kMinPanel, kPanelFloats / (N + IC)));
}

}  // namespace trident
