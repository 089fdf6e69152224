// The tensors a bf16 working copy keeps in fp32 (model/fp32_tensors.hpp): for GPT-2 and Llama layouts (RoPE
// and learned positions), a whole model and TP / pipeline slices of it, every flat element's packed
// position and every split of a range against a mask built here from the tensors' shapes and names
// (computed_in_fp32: the 1-D tensors and the position embedding), element by element.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/bf16_arithmetic.hpp"
#include "core/config.hpp"
#include "model/fp32_tensors.hpp"
#include "model/parameters.hpp"
#include "model/shapes.hpp"

namespace trident {
namespace {

ModelConfig small_model(Architecture arch) {
  ModelConfig m;
  m.architecture = arch;
  m.vocab_size = 50;
  m.seq_len = 8;
  m.layers = 3;
  m.hidden = 16;
  m.heads = 4;
  if (arch == Architecture::Llama) {  // RMSNorm weights, no biases (kv heads replicated at tp 2)
    m.norm = Norm::RmsNorm;
    m.mlp = Mlp::SwiGlu;
    m.bias = false;
    m.tie_embeddings = false;
    m.kv_heads = 1;
  }
  return m;
}

void check(const ParameterLayout& layout) {
  std::vector<bool> kept(size_t(layout.total()), false);
  int64_t one_dimensional = 0;
  for (const auto& t : layout.tensors())
    if (test::computed_in_fp32(t)) {
      for (int64_t i = t.offset; i < t.offset + t.numel; ++i) kept[size_t(i)] = true;
      one_dimensional += t.numel;
    }
  ASSERT_GT(one_dimensional, 0);
  const Fp32Tensors fp32(layout);
  EXPECT_EQ(fp32.size(), one_dimensional);
  int64_t before = 0;
  for (int64_t f = 0; f <= layout.total(); ++f) {
    ASSERT_EQ(fp32.packed_offset(f), before) << "flat element " << f;
    if (f < layout.total()) before += kept[size_t(f)];
  }
  // Every range whose ends step through the layout: the pieces tile it in order, each all kept or none.
  const int64_t n = layout.total(), step = std::max<int64_t>(1, n / 37);
  for (int64_t begin = 0; begin < n; begin += step)
    for (int64_t end = begin + 1; end <= n; end += step) {
      int64_t at = begin;
      fp32.split(begin, end, [&](int64_t a, int64_t b, bool is_fp32) {
        ASSERT_EQ(a, at);
        ASSERT_LT(a, b);
        for (int64_t i = a; i < b; ++i) ASSERT_EQ(kept[size_t(i)], is_fp32) << "element " << i << " of [" << a << ", " << b << ")";
        at = b;
      });
      ASSERT_EQ(at, end) << "[" << begin << ", " << end << ")";
    }
}

// A whole model and, at tp 2, each rank's first and last pipeline stage.
void check_model(const ModelConfig& m) {
  check(ParameterLayout(GptShapes::from(m)));
  const GptShapes tp2 = GptShapes::from(m, 2);
  for (int rank : {0, 1}) {
    check(ParameterLayout(tp2, rank, 2, ChunkSpec{0, 2, true, false}));
    check(ParameterLayout(tp2, rank, 2, ChunkSpec{2, 3, false, true}));
  }
}

TEST(Fp32Tensors, PackedOffsetsAndSplitsFollowTheTensorsReadInFp32) {
  for (const bool llama : {false, true})
    for (const Positions positions : {Positions::Learned, Positions::Rope}) {
      if (!llama && positions == Positions::Rope) continue;  // (GPT-2 learns its positions)
      SCOPED_TRACE(fmt::format("{}, {} positions", llama ? "llama" : "gpt2", positions == Positions::Rope ? "rope" : "learned"));
      ModelConfig m = small_model(llama ? Architecture::Llama : Architecture::Gpt2);
      m.positions = positions;
      check_model(m);
    }
}

}  // namespace
}  // namespace trident
