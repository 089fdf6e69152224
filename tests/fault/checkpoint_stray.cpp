// Resume by verified content, not by file name (issue #17, items 4 and 8): a stray copy of step 2
// named step_99999999.h5 is neither resumed in place of the real newest checkpoint nor a reason for
// `keep` to delete the newer ones; a step edited inside a file (as with h5py) is refused and the
// previous checkpoint resumed; a `latest` naming a missing file is reported.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hdf5.h>

#include <filesystem>

#include "common/test_support.hpp"
#include "fault/checkpoint_fault_util.hpp"

namespace fs = std::filesystem;

namespace trident::test {
namespace {

using ::testing::HasSubstr;

Config resuming(const TinyState& s, const std::string& dir) {
  Config cfg = s.cfg;
  cfg.checkpoint.dir = dir;
  cfg.checkpoint.resume = "auto";
  return cfg;
}

TEST(CheckpointStray, AStrayNameIsNeitherResumedNorAReasonToDeleteNewerCheckpoints) {
  const auto s2 = tiny_state(2), s5 = tiny_state(5), s6 = tiny_state(6), s7 = tiny_state(7);
  const std::string dir = shared_temp_dir("trident-fault-stray");
  const std::string other = shared_temp_dir("trident-fault-stray-src");
  const std::string copy_of_2 = write_tiny(*s2, other, 2);
  write_tiny(*s5, dir, 5);
  write_tiny(*s6, dir, 6);
  const std::string stray = dir + "/step_99999999.h5";
  if (world_rank() == 0) fs::copy_file(copy_of_2, stray);
  MPI_Barrier(MPI_COMM_WORLD);

  auto loaded = empty_like(*s6);
  const auto point = resume_checkpoint(resuming(*s6, dir), loaded->shard, MPI_COMM_WORLD);
  ASSERT_TRUE(point.has_value());
  EXPECT_EQ(point->header.path, dir + "/step_00000006.h5");
  EXPECT_EQ(point->header.progress.step, 6);
  EXPECT_EQ(loaded->params, s6->params);
  EXPECT_EQ(loaded->m, s6->m);

  // keep = 2 after step 7: 7 and 6 stay, 5 goes, the stray copy is left alone.
  write_tiny(*s7, dir, 7, 2);
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_TRUE(fs::exists(dir + "/step_00000007.h5"));
  EXPECT_TRUE(fs::exists(dir + "/step_00000006.h5"));
  EXPECT_FALSE(fs::exists(dir + "/step_00000005.h5"));
  EXPECT_TRUE(fs::exists(stray));
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(CheckpointStray, AStepEditedInsideTheFileIsRefusedAndThePreviousOneResumed) {
  const auto s5 = tiny_state(5), s6 = tiny_state(6);
  const std::string dir = shared_temp_dir("trident-fault-edit");
  write_tiny(*s5, dir, 5);
  const std::string edited = write_tiny(*s6, dir, 6);
  if (world_rank() == 0) {  // what `h5py.File(path, "r+")["/train"].attrs["step"] = 5` does (root step too)
    hid_t f = H5Fopen(edited.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const int64_t five = 5;
    for (const char* obj : {"/", "/train"}) {
      hid_t a = H5Aopen_by_name(f, obj, "step", H5P_DEFAULT, H5P_DEFAULT);
      EXPECT_GE(H5Awrite(a, H5T_NATIVE_INT64, &five), 0);
      H5Aclose(a);
    }
    H5Fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  auto loaded = empty_like(*s5);
  const auto point = resume_checkpoint(resuming(*s5, dir), loaded->shard, MPI_COMM_WORLD);
  ASSERT_TRUE(point.has_value());
  EXPECT_EQ(point->header.path, dir + "/step_00000005.h5");
  ASSERT_EQ(point->skipped.size(), 1u);
  EXPECT_THAT(point->skipped[0], HasSubstr(edited + ": damaged checkpoint: its HDF5 metadata"));
  EXPECT_EQ(loaded->params, s5->params);
}

TEST(CheckpointStray, LatestNamingAMissingFileIsReported) {
  TRIDENT_REQUIRE_RANKS(1);
  const auto s3 = tiny_state(3);
  const std::string dir = shared_temp_dir("trident-fault-latest");
  const std::string path = write_tiny(*s3, dir, 3);
  write_file(dir + "/latest", "step_00000009.h5\n");
  std::string out;
  EXPECT_EQ(run_command(fmt::format("{} {} ckpt inspect {}", without_parent_mpi_env(), trident_binary(), dir), &out), 0)
      << out;
  EXPECT_THAT(out, HasSubstr(dir + "/latest names " + dir + "/step_00000009.h5, which does not exist; using the "
                                   "newest file, " + path));
  EXPECT_THAT(out, HasSubstr("step            3"));
  EXPECT_EQ(run_command(fmt::format("{} {} ckpt list {}", without_parent_mpi_env(), trident_binary(), dir), &out), 0)
      << out;
  EXPECT_THAT(out, HasSubstr("latest names step_00000009.h5, which does not exist"));
}

}  // namespace
}  // namespace trident::test
