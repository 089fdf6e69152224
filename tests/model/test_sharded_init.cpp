// Sharded start-up (issue 14): every chunk of every TP rank of a tp 2 x pp 2 layout (and with two
// virtual stages) initialises, or reads from a Hugging Face file, exactly its slice of the serial
// run's whole model. The whole model and the slicing are computed here independently of the
// production code: the serial model from the documented rule (N(0, std) weights and embeddings,
// N(0, std/sqrt(2L)) residual projections, biases 0, LayerNorm weights 1, vocabulary padding 0,
// element i of tensor `name` drawn by init_normal(seed, name, i)), each slice element by element from
// the Megatron split of its tensor. Everything is compared bitwise: values must not change with the layout.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/config.hpp"
#include "model/parameters.hpp"
#include "model/shapes.hpp"
#include "pipeline/partition.hpp"
#include "safetensors/safetensors.hpp"

namespace trident {
namespace {

constexpr double kStd = 0.02;
constexpr uint64_t kSeed = 1234;

ModelConfig small_model() {
  ModelConfig m;
  m.vocab_size = 203;  // padded: Vp = 204 at tp 2 with vocab_pad_to 4
  m.vocab_pad_to = 4;
  m.seq_len = 8;
  m.layers = 5;
  m.hidden = 16;
  m.heads = 4;
  m.ffn_hidden = 0;
  m.tie_embeddings = true;
  return m;
}

// The serial run's whole model, tensor by tensor in storage layout ([out, in], vocabulary padded).
std::map<std::string, std::vector<float>> serial_model(const GptShapes& s) {
  std::map<std::string, std::vector<float>> model;
  const ParameterLayout whole(s);
  for (const auto& t : whole.tensors()) {
    std::vector<float> v(size_t(t.numel), 0.f);
    const bool vocab = t.name == "transformer.wte.weight" || t.name == "lm_head.weight";
    const int64_t real = vocab ? s.V * t.shape[1] : t.numel;
    const bool residual = t.name.find("c_proj.weight") != std::string::npos;
    const double sd = residual ? kStd / std::sqrt(2.0 * double(s.L)) : kStd;
    if (t.name.find("ln_") != std::string::npos && t.name.find(".weight") != std::string::npos) {
      std::fill(v.begin(), v.end(), 1.f);
    } else if (t.shape.size() == 2) {
      for (int64_t i = 0; i < real; ++i) v[size_t(i)] = static_cast<float>(sd * init_normal(kSeed, t.name, i));
    }
    model[t.name] = std::move(v);
  }
  return model;
}

// Index in the whole tensor of element (r, c) of TP rank `rank`'s slice of tensor t (of `tp` ranks).
int64_t whole_index(const ParamTensor& t, int rank, int tp, int64_t r, int64_t c) {
  const bool matrix = t.global_shape.size() == 2;
  const int64_t gcols = matrix ? t.global_shape[1] : 1;
  const std::string& n = t.name;
  if (n.find("attn.c_attn") != std::string::npos) {  // q, k and v row blocks, each split by heads
    const int64_t part = t.global_shape[0] / 3, mine = part / tp;
    return ((r / mine) * part + rank * mine + r % mine) * gcols + c;
  }
  if (n.find("mlp.c_fc") != std::string::npos || n == "transformer.wte.weight" || n == "lm_head.weight")
    return (rank * t.shape[0] + r) * gcols + c;  // rows split
  if (matrix && n.find("c_proj.weight") != std::string::npos)
    return r * gcols + rank * t.shape[1] + c;  // columns split
  return r * gcols + c;  // replicated
}

// The expected buffer of a layout: each element looked up in the serial model.
std::vector<float> expected_slice(const ParameterLayout& layout, const std::map<std::string, std::vector<float>>& whole,
                                  int rank, int tp) {
  std::vector<float> out(size_t(layout.total()));
  for (const auto& t : layout.tensors()) {
    const int64_t cols = t.shape.size() == 2 ? t.shape[1] : 1;
    for (int64_t r = 0; r < t.shape[0]; ++r)
      for (int64_t c = 0; c < cols; ++c)
        out[size_t(t.offset + r * cols + c)] = whole.at(t.name)[size_t(whole_index(t, rank, tp, r, c))];
  }
  return out;
}

// Bitwise equality, naming the first differing element's tensor.
void expect_bitwise(const ParameterLayout& layout, const std::vector<float>& got, const std::vector<float>& want,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& t : layout.tensors())
    for (int64_t i = t.offset; i < t.offset + t.numel; ++i)
      if (std::memcmp(&got[size_t(i)], &want[size_t(i)], sizeof(float)) != 0) {
        ADD_FAILURE() << what << ": " << t.name << " element " << i - t.offset << " is " << got[size_t(i)]
                      << ", the serial model's " << want[size_t(i)];
        return;
      }
}

struct Chunk {
  int tp_rank;
  int64_t global_chunk;
  ChunkSpec spec;
};

// Every (TP rank, chunk) of a tp x pp x virtual_stages layout of `m`.
std::vector<Chunk> chunks_of(const ModelConfig& m, int tp, int pp, int v) {
  Config cfg;
  cfg.model = m;
  cfg.mesh.tp = tp;
  cfg.mesh.pp = pp;
  cfg.mesh.virtual_stages = v;
  const auto sizes = partition_layers(cfg);
  std::vector<Chunk> out;
  for (int r = 0; r < tp; ++r)
    for (int64_t g = 0; g < int64_t(pp) * v; ++g) out.push_back({r, g, chunk_spec(sizes, g)});
  return out;
}

std::string name_of(const Chunk& c, int tp, int pp, int v) {
  return "tp " + std::to_string(tp) + " x pp " + std::to_string(pp) + " x v " + std::to_string(v) + ", tp rank " +
         std::to_string(c.tp_rank) + ", chunk " + std::to_string(c.global_chunk);
}

TEST(ShardedInit, SerialReferenceIsTheWholeModelInit) {
  // The reference above is the same rule as the serial run's: the whole model of one rank.
  const GptShapes s = GptShapes::from(small_model(), 1);
  const ParameterLayout whole(s);
  std::vector<float> got(size_t(whole.total()));
  init_parameters(whole, kStd, kSeed, got.data());
  expect_bitwise(whole, got, expected_slice(whole, serial_model(s), 0, 1), "whole model");
}

TEST(ShardedInit, EveryChunkOfEveryTpRankIsItsSliceOfTheSerialModel) {
  for (const bool tied : {true, false}) {
    ModelConfig m = small_model();
    m.tie_embeddings = tied;
    for (const auto& [tp, pp, v] : {std::tuple{2, 2, 1}, std::tuple{2, 2, 2}, std::tuple{1, 2, 2}, std::tuple{2, 1, 1}}) {
      const GptShapes s = GptShapes::from(m, tp);
      const auto whole = serial_model(s);
      int64_t held = 0;
      for (const auto& c : chunks_of(m, tp, pp, v)) {
        const ParameterLayout layout(s, c.tp_rank, tp, c.spec);
        std::vector<float> got(size_t(layout.total()), -7.f);
        init_parameters(layout, kStd, kSeed, got.data());
        expect_bitwise(layout, got, expected_slice(layout, whole, c.tp_rank, tp),
                       name_of(c, tp, pp, v) + (tied ? ", tied" : ", untied"));
        held += layout.total();
      }
      // The chunks together hold every element once per TP rank for replicated tensors (and the tied
      // embedding twice when the head is on another chunk): a layout that silently lost a tensor fails.
      EXPECT_GE(held, ParameterLayout(s).total()) << tp << "x" << pp << "x" << v;
    }
  }
}

TEST(ShardedInit, AnyElementRangeOfAChunkIsTheSameAsTheWholeChunk) {
  // The API a ZeRO-3 partition uses: elements [begin, end) of a chunk's flat buffer, on their own.
  const ModelConfig m = small_model();
  const GptShapes s = GptShapes::from(m, 2);
  for (const auto& c : chunks_of(m, 2, 2, 2)) {
    const ParameterLayout layout(s, c.tp_rank, 2, c.spec);
    std::vector<float> whole_chunk(size_t(layout.total()));
    init_parameters(layout, kStd, kSeed, whole_chunk.data());
    const int64_t n = layout.total();
    for (const auto& [b, e] : {std::pair{int64_t(0), n}, {n / 3, n / 3 + 1}, {n / 7, 2 * n / 3}, {n - 5, n}, {n / 2, n / 2}}) {
      std::vector<float> part(size_t(e - b));
      init_parameter_range(layout, kStd, kSeed, b, e, part.data());
      EXPECT_EQ(0, std::memcmp(part.data(), whole_chunk.data() + b, sizeof(float) * size_t(e - b)))
          << name_of(c, 2, 2, 2) << " range [" << b << ", " << e << ")";
    }
  }
}

TEST(ShardedInit, InitFromReadsEachChunksSliceOfTheFile) {
  // A Hugging Face file of the serial model (written by the serial path), read back by every chunk of
  // every TP rank: each gets exactly its slice, padding rows zero.
  for (const bool tied : {true, false}) {
    ModelConfig m = small_model();
    m.tie_embeddings = tied;
    const GptShapes s1 = GptShapes::from(m, 1);
    const ParameterLayout serial(s1);
    std::vector<float> values(size_t(serial.total()));
    init_parameters(serial, kStd, kSeed, values.data());
    // Distinct values everywhere (not only the random ones): a misplaced bias or LayerNorm is seen.
    for (size_t i = 0; i < values.size(); ++i) values[i] += 1e-3f * float(i % 977);
    for (const auto& t : serial.tensors())
      if (t.name == "transformer.wte.weight" || t.name == "lm_head.weight")
        std::fill(values.begin() + t.offset + s1.V * t.shape[1], values.begin() + t.offset + t.numel, 0.f);
    const std::string path = ::testing::TempDir() + "sharded_init_" + std::to_string(::getpid()) + ".safetensors";
    save_hf_safetensors(serial, values.data(), path);
    for (const auto& [tp, pp, v] : {std::tuple{2, 2, 1}, std::tuple{2, 2, 2}}) {
      const GptShapes s = GptShapes::from(m, tp);
      // The serial model re-padded to this tp's Vp, tensor by tensor.
      std::map<std::string, std::vector<float>> whole;
      const ParameterLayout padded(s);
      for (const auto& t : padded.tensors()) {
        const auto& t1 = serial.find(t.name);
        std::vector<float> w(size_t(t.numel), 0.f);
        std::copy(values.begin() + t1.offset, values.begin() + t1.offset + std::min(t1.numel, t.numel), w.begin());
        whole[t.name] = std::move(w);
      }
      for (const auto& c : chunks_of(m, tp, pp, v)) {
        const ParameterLayout layout(s, c.tp_rank, tp, c.spec);
        std::vector<float> got(size_t(layout.total()), -7.f);
        load_hf_safetensors(layout, path, got.data());
        expect_bitwise(layout, got, expected_slice(layout, whole, c.tp_rank, tp),
                       "init_from, " + name_of(c, tp, pp, v) + (tied ? ", tied" : ", untied"));
      }
    }
    std::filesystem::remove(path);
  }
}

}  // namespace
}  // namespace trident
