// Hugging Face weights (GPT-2's or Llama's, one file or shards) into a rank's chunk: each tensor's TP slice is read from the file on
// its own (the rectangles the checkpoint format also uses, checkpoint/shard_map.hpp), so a rank
// never holds more of the model than its slices and one dataset row.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>

#include "checkpoint/shard_map.hpp"
#include "core/error.hpp"
#include "model/parameters.hpp"
#include "safetensors/safetensors.hpp"
#include "safetensors/safetensors_set.hpp"

namespace trident {
namespace {

// Hugging Face checkpoints saved from GPT2Model have no "transformer." prefix; accept both.
std::string hf_name_in(const SafetensorsSet& f, const std::string& name) {
  if (f.has(name)) return name;
  const std::string prefix = "transformer.";
  if (name.rfind(prefix, 0) == 0 && f.has(name.substr(prefix.size()))) return name.substr(prefix.size());
  throw Error(fmt::format("{}: tensor {} is missing", f.path(), name));
}

}  // namespace

void load_hf_tensor(const SafetensorsSet& weights, const ParameterLayout& layout, const ParamTensor& t, float* out) {
  const std::string name = hf_name_in(weights, t.name);
  const SafetensorsReader& file = weights.file_of(name);
  const auto shape = ckpt::dataset_shape(t, layout.shapes());
  if (file.shape(name) != shape)
    throw Error(fmt::format("safetensors file '{}': tensor '{}' has shape [{}], expected [{}]", file.path(), name,
                            fmt::join(file.shape(name), ", "), fmt::join(shape, ", ")));
  std::memset(out, 0, sizeof(float) * size_t(t.numel));
  const int64_t dataset_cols = shape.size() > 1 ? shape[1] : 1;
  std::vector<float> row;
  for (const auto& b : ckpt::tensor_blocks(t, layout.shapes(), layout.tp_rank(), layout.tp_size(), 0, t.numel)) {
    row.resize(size_t(b.cols));
    for (int64_t r = 0; r < b.rows; ++r) {
      file.read_f32_range(name, (b.row0 + r) * dataset_cols + b.col0, b.cols, row.data());
      float* dst = out + b.src + r * b.src_row_stride;
      for (int64_t c = 0; c < b.cols; ++c) dst[c * b.src_col_stride] = row[size_t(c)];
    }
  }
  file.release(name);
}

void load_hf_safetensors(const ParameterLayout& layout, const std::string& path, float* host) {
  const SafetensorsSet weights(path);
  for (const auto& t : layout.tensors()) load_hf_tensor(weights, layout, t, host + t.offset);
}

}  // namespace trident
