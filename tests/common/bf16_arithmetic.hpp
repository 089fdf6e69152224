#pragma once
// bf16 rounding computed without bit tricks, the tests' independent check of trident's (core/bf16.hpp,
// the backends' round_mantissa): x to 8 significant bits, ties to even (nearbyint in the default
// rounding mode), on bf16's grid (fp32's exponent range, so subnormals keep a fixed step of 2^-133);
// past bf16's largest finite value, infinity.
#include <algorithm>
#include <cmath>
#include <limits>

namespace trident::test {

inline float bf16_by_arithmetic(float x) {
  if (std::isnan(x) || std::isinf(x) || x == 0.0f) return x;
  int e = 0;
  std::frexp(double(x), &e);
  const int step = std::max(e - 8, -133);
  const double v = std::ldexp(std::nearbyint(std::ldexp(double(x), -step)), step);
  if (std::fabs(v) > double(std::numeric_limits<float>::max())) return std::copysign(INFINITY, x);
  return float(v);
}

// Whether a bf16 working copy computes with tensor t's fp32 masters: what the model reads in fp32, the 1-D
// tensors (biases, norms' weights and biases) and the position embedding (GPT-2's or a Llama with learned
// positions), by their shapes and Hugging Face names; the rest (the GEMM weights, the token embedding) it
// reads rounded to bf16.
template <class Tensor>
bool computed_in_fp32(const Tensor& t) {
  return t.shape.size() == 1 || t.name == "transformer.wpe.weight" || t.name == "model.embed_positions.weight";
}

// The value a bf16 working copy computes with for the master x of tensor t.
template <class Tensor>
float working_copy_value(const Tensor& t, float x) {
  return computed_in_fp32(t) ? x : bf16_by_arithmetic(x);
}

}  // namespace trident::test
