#pragma once
// Hugging Face weights as one file or as several: `model.init_from` may name a .safetensors file, a
// model.safetensors.index.json (its "weight_map" gives each tensor's shard file, relative to the
// index), or a directory holding either (the index first). A shard is opened (memory-mapped) only when
// a tensor in it is first asked for, so a rank reading its slices of a large model maps only the
// shards that hold them.
#include <map>
#include <memory>
#include <string>

#include "safetensors/safetensors.hpp"

namespace trident {

class SafetensorsSet {
 public:
  // Throws trident::Error naming the path when it is none of the above, the index does not parse or
  // names a missing file; a single file is opened (and its header validated) at once.
  explicit SafetensorsSet(const std::string& path);

  const std::string& path() const { return path_; }
  bool has(const std::string& name) const;
  // The file holding tensor `name`, opened on first use; throws naming the tensor when absent.
  const SafetensorsReader& file_of(const std::string& name) const;
  // Files of the set (1 for a single file).
  size_t file_count() const { return files_.size(); }

 private:
  std::string path_;
  std::map<std::string, std::string> shard_of_;  // tensor -> file (empty with a single file)
  mutable std::map<std::string, std::unique_ptr<SafetensorsReader>> files_;  // by path; null until opened
};

}  // namespace trident
