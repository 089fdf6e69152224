// Damage of any byte of a checkpoint file (issue #17, item 2): one flipped bit in every byte of a
// small checkpoint's HDF5 metadata and user block, and in every 64th byte of its tensor data. Each
// damaged file must be refused with a clear message naming it (never a crash inside HDF5, never a
// silent load), by `verify_checkpoint` and the header read that `ckpt list` and resume use; and
// resume must fall back to the older valid checkpoint (checked for a sample of the flips of every
// class). The byte classes come from HDF5 itself on the intact file (dataset offsets and sizes) and
// from the superblock signature, not from trident's manifest.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "common/test_support.hpp"
#include "fault/checkpoint_fault_util.hpp"

namespace fs = std::filesystem;

namespace trident::test {
namespace {

using ::testing::HasSubstr;

TEST(CheckpointDamageSweep, EveryByteClassIsRefusedClearlyAndResumeFallsBack) {
  TRIDENT_REQUIRE_RANKS(1);
  const auto older = tiny_state(1);
  const auto newer = tiny_state(2);
  const std::string dir = shared_temp_dir("trident-fault-sweep");
  write_tiny(*older, dir, 1);
  const std::string path = write_tiny(*newer, dir, 2);
  const std::string intact = read_bytes(path);
  const std::vector<ByteClass> cls = classify(path, intact);

  Config cfg = older->cfg;
  cfg.checkpoint.dir = dir;
  cfg.checkpoint.resume = "auto";
  std::map<ByteClass, int> flips, refused, fallbacks;
  for (size_t i = 0; i < intact.size(); ++i) {
    if (cls[i] == ByteClass::TensorData && i % 64 != 0) continue;
    const FlippedBit flip(path, int64_t(i), i % 8);
    ++flips[cls[i]];
    const std::string where = fmt::format("bit {} of byte {} ({})", i % 8, i, name_of(cls[i]));
    // The header read (ckpt list, inspect, resume's first check) and ckpt verify.
    std::string err = checkpoint_error_of([&] { read_checkpoint_header(path); });
    if (err.empty()) {
      bool all_ok = true;
      err = checkpoint_error_of([&] {
        for (const auto& v : verify_checkpoint(path)) all_ok = all_ok && v.ok;
      });
      if (err.empty() && !all_ok) err = path + ": verify_checkpoint found a damaged dataset";
    }
    ASSERT_THAT(err, HasSubstr(path)) << where << " was not refused";
    ++refused[cls[i]];
    // Resume falls back to step 1 (every 97th flip: a load reads the whole older checkpoint).
    if (i % 97 == 0 || (cls[i] == ByteClass::UserBlock && i < 64)) {
      auto loaded = empty_like(*older);
      const auto point = resume_checkpoint(cfg, loaded->shard, MPI_COMM_WORLD);
      ASSERT_TRUE(point.has_value()) << where;
      EXPECT_EQ(point->header.progress.step, 1) << where;
      ASSERT_EQ(point->skipped.size(), 1u) << where;
      EXPECT_THAT(point->skipped[0], HasSubstr(path)) << where;
      EXPECT_EQ(loaded->params, older->params) << where;
      ++fallbacks[cls[i]];
    }
  }
  EXPECT_EQ(read_bytes(path), intact);
  for (ByteClass c : {ByteClass::UserBlock, ByteClass::Metadata, ByteClass::TensorData}) {
    EXPECT_GT(flips[c], 0) << name_of(c);
    EXPECT_GT(fallbacks[c], 0) << name_of(c);
    std::printf("%-14s %6d flips, %6d refused, %4d resumed from the older checkpoint\n", name_of(c), flips[c],
                refused[c], fallbacks[c]);
  }
}

}  // namespace
}  // namespace trident::test
