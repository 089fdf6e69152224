// Shared pieces of the file format: the model's tensor list and whole-dataset checksums.
#include "checkpoint/format.hpp"

#include <fmt/ranges.h>

#include <algorithm>

#include "checkpoint/checksum.hpp"
#include "checkpoint/h5.hpp"
#include "checkpoint/shard_map.hpp"

namespace trident::ckpt {

using h5::Handle;

std::vector<TensorSpec> model_tensors(const ModelConfig& m) {
  const GptShapes s = GptShapes::from(m, 1);
  const ParameterLayout whole(s, 0, 1);
  std::vector<TensorSpec> out;
  for (const auto& t : whole.tensors()) out.push_back({t.name, dataset_shape(t, s)});
  return out;
}

std::string shape_str(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

uint64_t checksum_rows(hid_t dset, const std::vector<int64_t>& shape, int64_t row0, int64_t rows, hid_t dxpl,
                       const std::string& what) {
  const int64_t cols = shape.size() > 1 ? shape[1] : 1;
  Handle fspace(H5Dget_space(dset), H5Sclose);
  // Read in slabs of at most ~16 Mi elements to bound memory.
  const int64_t slab_rows = std::max<int64_t>(1, (int64_t(1) << 24) / std::max<int64_t>(cols, 1));
  std::vector<float> buf;
  uint64_t sum = 0;
  int64_t r = row0;
  const int64_t stop = row0 + rows;
  // The number of H5Dread calls depends on `rows`: use an independent transfer (dxpl) when ranks
  // read different row counts.
  do {
    const int64_t n = std::min(slab_rows, stop - r);
    const hsize_t start[2] = {hsize_t(r), 0}, count[2] = {hsize_t(std::max<int64_t>(n, 0)), hsize_t(cols)};
    if (n > 0) {
      if (H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, nullptr, count, nullptr) < 0) h5::fail(what);
    } else {
      H5Sselect_none(fspace);
    }
    const hsize_t mcount = hsize_t(std::max<int64_t>(n * cols, 1));
    Handle mspace(H5Screate_simple(1, &mcount, nullptr), H5Sclose);
    if (n <= 0) H5Sselect_none(mspace);
    buf.resize(size_t(mcount));
    if (H5Dread(dset, H5T_NATIVE_FLOAT, mspace, fspace, dxpl, buf.data()) < 0) h5::fail(what + ": cannot read");
    if (n > 0)
      sum += checksum_run(reinterpret_cast<const uint32_t*>(buf.data()), n * cols, uint64_t(r) * uint64_t(cols));
    r += std::max<int64_t>(n, 0);
  } while (r < stop);
  return sum;
}

std::vector<float> read_whole(hid_t dset, const std::vector<int64_t>& shape, const std::string& what) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  std::vector<float> out(size_t(std::max<int64_t>(n, 1)));
  if (H5Dread(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0) h5::fail(what + ": cannot read");
  out.resize(size_t(n));
  return out;
}

}  // namespace trident::ckpt
