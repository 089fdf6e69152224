#pragma once
// Names and shared pieces of the checkpoint file format (internal to src/checkpoint).
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.hpp"

namespace trident::ckpt {

inline constexpr const char* kFormatName = "trident-checkpoint";
inline constexpr const char* kLatestName = "latest";

// The tensor groups, in file order. Parameters always; the optimizer groups when present.
inline constexpr const char* kModelGroup = "/model";
inline constexpr const char* kExpAvgGroup = "/optim/exp_avg";
inline constexpr const char* kExpAvgSqGroup = "/optim/exp_avg_sq";
inline constexpr const char* kMasterGroup = "/optim/master";
inline constexpr const char* kDeckDataset = "/deck";

// One tensor of the model: its Hugging Face name and dataset shape.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

// The tensors of the whole model `m` describes, in ParameterLayout order.
std::vector<TensorSpec> model_tensors(const ModelConfig& m);

std::string shape_str(const std::vector<int64_t>& s);

// The checksum of rows [row0, row0 + rows) of a float32 dataset (all columns) read from `dset` with
// transfer property list dxpl (collective or independent); rows may be 0 (collective callers).
uint64_t checksum_rows(hid_t dset, const std::vector<int64_t>& shape, int64_t row0, int64_t rows, hid_t dxpl,
                       const std::string& what);

// Reads a whole float32 dataset (serial).
std::vector<float> read_whole(hid_t dset, const std::vector<int64_t>& shape, const std::string& what);

}  // namespace trident::ckpt
