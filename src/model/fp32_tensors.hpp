#pragma once
// The tensors a bf16 working copy keeps in fp32: what the model reads in fp32 (ParamTensor::kept_in_fp32),
// the 1-D tensors (every bias, the LayerNorm / RMSNorm weights and biases) and the position embedding. The
// model computes with their master values, as PyTorch's autocast does, and reads bf16 only where its
// kernels read bf16: the GEMM weights and the token embedding. A norm weight near 1 rounded to bf16 moves
// in steps of 2^-7, so the copy of a slowly trained weight stands still and then jumps by 0.8%; on #26's
// acceptance run (bf16_vs_fp32.sh) rounding them put bf16 3.8% from fp32 at one step and 0.24% on average,
// keeping these tensors in fp32 1.3% and 0.11% (benchmarks/README.md). They are 0.7% of GPT-2 124M's
// parameters.
//
// Their fp32 values are stored packed, one tensor after the other in flat order, beside the patterns of
// the whole layout (whose patterns of these tensors nobody reads); so a flat range [begin, end) has its
// fp32 elements in one packed range.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "model/parameters.hpp"

namespace trident {

class Fp32Tensors {
 public:
  explicit Fp32Tensors(const ParameterLayout& layout);

  // Elements kept in fp32.
  int64_t size() const { return runs_.empty() ? 0 : runs_.back().packed + (runs_.back().end - runs_.back().begin); }
  // Packed position of flat element `flat`: the number of fp32 elements before it.
  int64_t packed_offset(int64_t flat) const;

  // Calls piece(a, b, fp32) for the consecutive pieces [a, b) of the flat range [begin, end), in order:
  // fp32 pieces lie in tensors kept in fp32 (packed at packed_offset(a)), the others in none.
  template <class Piece>
  void split(int64_t begin, int64_t end, Piece piece) const {
    int64_t at = begin;
    for (const Run& r : runs_) {
      if (r.end <= at) continue;
      if (r.begin >= end) break;
      if (r.begin > at) piece(at, r.begin, false);
      const int64_t b = std::min(r.end, end);
      piece(std::max(r.begin, at), b, true);
      at = b;
    }
    if (at < end) piece(at, end, false);
  }

 private:
  struct Run {
    int64_t begin, end;  // flat elements [begin, end): adjacent tensors kept in fp32, merged
    int64_t packed;      // packed position of begin
  };
  std::vector<Run> runs_;
};

// A chunk's bf16 working copy as its optimizer writes it (model/bf16_working_copy.hpp): the bf16 patterns
// of every flat element, and the fp32 values of the tensors kept in fp32, packed.
struct WorkingCopyView {
  uint16_t* patterns = nullptr;
  float* fp32 = nullptr;
  const Fp32Tensors* fp32_tensors = nullptr;
};

}  // namespace trident
