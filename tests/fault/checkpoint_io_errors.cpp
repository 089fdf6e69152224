// An I/O error on one rank in the middle of a collective checkpoint write (issue #17, item 1): every
// rank ends the write with the same clear message (path, errno, the file system's free bytes), none
// waits in a collective HDF5 call, the partial file is removed and the previous checkpoint and
// `latest` are untouched. The error is injected after the rank's collective data write returned
// (WriteOptions::fail_write_on_rank), as a full or failing disk on one rank's side would do it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/test_support.hpp"
#include "fault/checkpoint_fault_util.hpp"

namespace fs = std::filesystem;

namespace trident::test {
namespace {

using ::testing::HasSubstr;

// Rank 0's string on every rank, to compare messages across ranks.
std::string from_rank0(std::string s) {
  int n = int(s.size());
  MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
  s.resize(size_t(n));
  MPI_Bcast(s.data(), n, MPI_CHAR, 0, MPI_COMM_WORLD);
  return s;
}

std::string first_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

TEST(CheckpointIoError, OneRankFailingEndsTheWriteOnEveryRankAlike) {
  const auto before = tiny_state(1);
  const auto after = tiny_state(2);
  const std::string dir = shared_temp_dir("trident-fault-io");
  const std::string first = write_tiny(*before, dir, 1);

  WriteOptions failing;
  failing.fail_write_on_rank = world_size() - 1;  // the last rank; at 1 rank, rank 0
  const std::string err = checkpoint_error_of([&] { write_tiny(*after, dir, 2, 0, failing); });
  EXPECT_THAT(err, HasSubstr(dir + "/step_00000002.h5.tmp: dataset /model/"));
  EXPECT_THAT(err, HasSubstr("injected I/O error"));
  EXPECT_THAT(err, HasSubstr(fmt::format("errno {}: {}", EIO, std::strerror(EIO))));
  EXPECT_THAT(err, HasSubstr("bytes free on the file system of " + dir));
  EXPECT_THAT(err, HasSubstr("the previous checkpoints and `latest` are unchanged"));
  EXPECT_EQ(err, from_rank0(err)) << "every rank throws the same message";

  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_FALSE(fs::exists(dir + "/step_00000002.h5.tmp")) << "the partial file is removed";
  EXPECT_FALSE(fs::exists(dir + "/step_00000002.h5"));
  EXPECT_EQ(first_line(dir + "/latest"), "step_00000001.h5");
  auto loaded = empty_like(*before);
  const CheckpointHeader h = load_checkpoint(first, loaded->cfg, loaded->shard, MPI_COMM_WORLD);
  EXPECT_EQ(h.progress.step, 1);
  EXPECT_EQ(loaded->params, before->params);
  EXPECT_EQ(loaded->v, before->v);

  // The job can go on: the next write succeeds.
  EXPECT_EQ(write_tiny(*after, dir, 2), dir + "/step_00000002.h5");
  EXPECT_EQ(first_line(dir + "/latest"), "step_00000002.h5");
}

}  // namespace
}  // namespace trident::test
