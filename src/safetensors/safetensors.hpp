#pragma once
// The safetensors format (https://github.com/huggingface/safetensors):
//   uint64 little-endian N | N bytes of JSON header | raw little-endian tensor data.
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end)} (offsets
// relative to the data section) and may hold "__metadata__", a map of strings to strings.
//
// SafetensorsReader memory-maps a file read-only and validates the whole header when it opens:
// JSON syntax, every entry's dtype/shape/offsets, offsets inside the data section, sizes that match
// dtype x shape, and no two tensors overlapping. Every error names the file (and the tensor).
// write_safetensors writes F32 tensors the way the Python library does (tensors sorted by name,
// header padded with spaces to a multiple of 8 bytes), atomically: a temporary file in the same
// directory, fsync, rename, fsync of the directory.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace trident {

class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(SafetensorsReader&&) noexcept;
  SafetensorsReader& operator=(SafetensorsReader&&) noexcept;

  const std::string& path() const;
  bool has(const std::string& name) const;
  // Tensor names, sorted.
  std::vector<std::string> names() const;
  // Shape / dtype ("F32", "BF16", ...) / element count of a tensor; throw naming it when missing.
  std::vector<int64_t> shape(const std::string& name) const;
  std::string dtype(const std::string& name) const;
  int64_t numel(const std::string& name) const;

  // Copies tensor `name` into out (numel floats), converting from F32, F16, BF16 or F64. Throws
  // trident::Error naming the tensor and file when it is missing, its shape is not expected_shape,
  // or its dtype is another one.
  void read_f32(const std::string& name, float* out, const std::vector<int64_t>& expected_shape) const;
  std::vector<float> read_f32(const std::string& name, const std::vector<int64_t>& expected_shape) const;
  // Copies elements [begin, begin + count) of tensor `name` (row-major) into out, converting as
  // read_f32 does; throws naming the tensor when the range lies outside it.
  void read_f32_range(const std::string& name, int64_t begin, int64_t count, float* out) const;
  // Drops the mapped pages of tensor `name` from this process (they are re-read if used again):
  // a rank that reads a model tensor by tensor keeps at most one tensor's pages resident.
  void release(const std::string& name) const;

  // The "__metadata__" map (empty when absent).
  const std::map<std::string, std::string>& metadata() const;
  bool has_metadata(const std::string& key) const;
  // Throws naming the key and file when absent.
  std::string metadata(const std::string& key) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One F32 tensor to write: `data` holds product(shape) floats, row-major.
struct SafetensorsTensor {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;
};

// One F32 tensor whose values `produce` returns when the writer reaches it: a file written from these
// holds one tensor in memory at a time.
struct SafetensorsStream {
  std::string name;
  std::vector<int64_t> shape;
  std::function<std::vector<float>()> produce;
};

// How a writer stores the float values: as they are (F32), or rounded to bfloat16 (BF16: to nearest,
// ties to even, core/bf16.hpp).
enum class SafetensorsDtype { F32, BF16 };

// Writes `tensors` (names unique, not "__metadata__") as F32 with `metadata` to `path`, atomically.
// Throws trident::Error naming the path on any I/O failure (the temporary file is removed).
void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});
// The same, tensor by tensor (`produce` must return product(shape) values; an exception from it
// leaves no file behind), in `dtype`.
void write_safetensors_streamed(const std::string& path, const std::vector<SafetensorsStream>& tensors,
                                const std::map<std::string, std::string>& metadata = {},
                                SafetensorsDtype dtype = SafetensorsDtype::F32);

}  // namespace trident
