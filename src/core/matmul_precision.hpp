#pragma once
// The operands of the linear layers' GEMMs (Kernels::matmul_forward/backward; deck key
// train.matmul_precision): exact fp32, or each element of both operands rounded (to nearest, ties to
// even) to TF32 (11 significant bits) or bfloat16 (8), the products summed in fp32 and the result in
// fp32: PyTorch's float32 matmul precision "highest", "high" and "medium". CUDA runs them on tensor
// cores (cuBLASLt CUBLAS_COMPUTE_32F_FAST_TF32 / _FAST_16BF); the Kokkos backend rounds copies of the
// operands and calls sgemm, so the CPU computes the same numbers up to the order of the fp32 sums.
// BF16 also rounds attention's operands at head sizes 64 and 128 (kernels.hpp attention_follows_bf16;
// CUDA: tensor-core flash attention); norms, the loss and the optimizer stay fp32.
namespace trident {

enum class MatmulPrecision { FP32, TF32, BF16 };

}  // namespace trident
