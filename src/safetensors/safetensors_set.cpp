#include "safetensors/safetensors_set.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/regular_file.hpp"

namespace trident {
namespace {

namespace fs = std::filesystem;

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr size_t kMaxIndexBytes = 64 << 20;

bool is_index(const std::string& path) {
  const std::string suffix = ".index.json";
  return path.size() >= suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

SafetensorsSet::SafetensorsSet(const std::string& path) : path_(path) {
  std::error_code ec;
  std::string file = path;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / kIndexName, ec)) {
      file = (fs::path(path) / kIndexName).string();
    } else if (fs::exists(fs::path(path) / "model.safetensors", ec)) {
      file = (fs::path(path) / "model.safetensors").string();
    } else {
      throw Error(fmt::format("{}: a directory without {} or model.safetensors", path, kIndexName));
    }
  }
  if (!is_index(file)) {
    files_.emplace(file, std::make_unique<SafetensorsReader>(file));
    return;
  }
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(read_small_file(file, kMaxIndexBytes));
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: not a safetensors index ({})", file, e.what()));
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object() ||
      index["weight_map"].empty())
    throw Error(fmt::format("{}: no \"weight_map\" object naming each tensor's file", file));
  const fs::path dir = fs::path(file).parent_path();
  for (const auto& [name, shard] : index["weight_map"].items()) {
    if (!shard.is_string())
      throw Error(fmt::format("{}: weight_map[\"{}\"] is not a file name", file, name));
    const std::string shard_path = (dir / shard.get<std::string>()).lexically_normal().string();
    if (!files_.count(shard_path)) {
      if (!fs::exists(shard_path, ec))
        throw Error(fmt::format("{}: tensor {} is in {}, which does not exist", file, name, shard_path));
      files_.emplace(shard_path, nullptr);
    }
    shard_of_[name] = shard_path;
  }
}

bool SafetensorsSet::has(const std::string& name) const {
  if (!shard_of_.empty()) return shard_of_.count(name) > 0;
  return files_.begin()->second->has(name);
}

const SafetensorsReader& SafetensorsSet::file_of(const std::string& name) const {
  if (shard_of_.empty()) return *files_.begin()->second;
  const auto it = shard_of_.find(name);
  if (it == shard_of_.end()) throw Error(fmt::format("{}: tensor {} is missing", path_, name));
  auto& reader = files_.at(it->second);
  if (!reader) reader = std::make_unique<SafetensorsReader>(it->second);
  if (!reader->has(name))
    throw Error(fmt::format("{}: the index puts tensor {} in {}, which does not hold it", path_, name, it->second));
  return *reader;
}

}  // namespace trident
