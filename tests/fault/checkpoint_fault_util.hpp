#pragma once
// Helpers of the checkpoint fault tests: a tiny model's state with known values (no trainer), shared
// temporary directories, file bytes, and the message of a CheckpointError.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "core/config.hpp"
#include "model/parameters.hpp"

namespace trident::test {

// A 1-layer GPT (vocab 256, hidden 16, 4 heads, seq 8) split tp = world, with parameters and both
// moments set to values that depend on (value_seed, rank, element) only: a checkpoint of it is ~100 KB.
struct TinyState {
  Config cfg;
  std::unique_ptr<ParameterLayout> layout;
  std::vector<float> params, m, v;
  RankShard shard;
};
std::unique_ptr<TinyState> tiny_state(uint64_t value_seed);
// The same layout with every buffer set to -1 (to load into).
std::unique_ptr<TinyState> empty_like(const TinyState& s);

// Writes s as the checkpoint of `step` into dir (collective); returns the path.
std::string write_tiny(const TinyState& s, const std::string& dir, int64_t step, int64_t keep = 0,
                       const WriteOptions& options = {});

// A temporary directory shared by all ranks (created by rank 0, removed at exit unless
// TRIDENT_KEEP_TEST_FILES is set).
std::string shared_temp_dir(const std::string& prefix);

// The bytes of a checkpoint file by what they hold, from HDF5 itself on the intact file (dataset
// offsets and sizes) and the superblock signature, independently of trident's manifest.
enum class ByteClass { UserBlock, Metadata, TensorData };
const char* name_of(ByteClass c);
std::vector<ByteClass> classify(const std::string& path, const std::string& bytes);

std::string read_bytes(const std::string& path);

// Flips one bit of a file in place for its lifetime.
class FlippedBit {
 public:
  FlippedBit(const std::string& path, int64_t offset, int bit);
  ~FlippedBit();
  FlippedBit(const FlippedBit&) = delete;
  FlippedBit& operator=(const FlippedBit&) = delete;

 private:
  std::string path_;
  int64_t offset_;
  int bit_;
};

void write_bytes(const std::string& path, const std::string& bytes);

// The message of the CheckpointError f throws ("" when none).
template <class F>
std::string checkpoint_error_of(F f) {
  try {
    f();
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

}  // namespace trident::test
