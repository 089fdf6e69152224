// Signals at step boundaries (train/stop_signals.hpp), on 2 ranks in one process each: every rank
// reaches the same decision whichever rank was signalled; one signal that lands on the ranks at
// different times (one before a step boundary, one after) gives one checkpoint, not two on
// consecutive steps; SIGTERM and SIGINT always stop; without checkpoint.dir nothing is saved.
// The counters are process-wide, so each test builds one StopSignals and runs its phases in order.
#include <gtest/gtest.h>
#include <mpi.h>
#include <signal.h>

#include <numeric>
#include <vector>

#include "comm/group.hpp"
#include "common/test_support.hpp"
#include "train/stop_signals.hpp"

namespace trident::test {
namespace {

Config with(const std::string& dir, OnSignal on_signal) {
  Config cfg;
  cfg.checkpoint.dir = dir;
  cfg.runtime.on_signal = on_signal;
  return cfg;
}

// The decision every rank must reach, compared across ranks too.
void expect_everywhere(const StopDecision& d, bool checkpoint, bool exit, int code) {
  EXPECT_EQ(d.checkpoint, checkpoint);
  EXPECT_EQ(d.exit, exit);
  EXPECT_EQ(d.exit_code, code);
  int mine[3] = {d.checkpoint, d.exit, d.exit_code}, lo[3], hi[3];
  MPI_Allreduce(mine, lo, 3, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(mine, hi, 3, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(lo[i], hi[i]) << "ranks disagree on field " << i;
}

// The handlers as the trainer has them from its first step on (before it, SIGTERM ends the process).
void start_training() {
  install_stop_signal_counters();
  mark_training_started();
}

// Takes up what earlier tests left counted (the counters are process-wide; a new StopSignals starts
// with every counted signal pending, as the trainer's must for signals sent during start-up).
void drain(StopSignals& stop) { stop.poll(0); }

// Every rank of the test, as the trainer's mesh->world().
Group& world() {
  static Group g("world", MPI_COMM_WORLD, [] {
    std::vector<int> ranks(world_size());
    std::iota(ranks.begin(), ranks.end(), 0);
    return ranks;
  }(), MpiWait::Block);
  return g;
}

int rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

TEST(StopSignals, OneSignalLandingAcrossAStepBoundaryGivesOneCheckpoint) {
  start_training();
  StopSignals stop(with("/tmp/unused", OnSignal::CheckpointContinue), &world());
  drain(stop);
  expect_everywhere(stop.poll(1), false, false, 0);
  if (rank() == 0) raise(SIGUSR1);  // rank 0 gets the signal before the boundary of step 2 ...
  expect_everywhere(stop.poll(2), true, false, 0);
  stop.checkpoint_done();
  if (rank() != 0) raise(SIGUSR1);  // ... the other ranks just after it: the same signal
  expect_everywhere(stop.poll(3), false, false, 0);
  expect_everywhere(stop.poll(4), false, false, 0);
}

TEST(StopSignals, SigtermOnOneRankStopsEveryRankWithACheckpoint) {
  start_training();
  StopSignals stop(with("/tmp/unused", OnSignal::CheckpointContinue), &world());
  drain(stop);
  expect_everywhere(stop.poll(1), false, false, 0);
  if (rank() == 1 % world_size()) raise(SIGTERM);
  expect_everywhere(stop.poll(2), true, true, kExitCheckpointedOnSignal);
}

// SIGINT (Ctrl-C) is treated as SIGTERM. A process takes one SIGINT only (a second one ends it at
// once), so this is the file's only SIGINT; the case without checkpoint.dir is tests/fault/run_signals.cpp's.
TEST(StopSignals, SigintOnOneRankStopsEveryRankWithACheckpointEvenWhenContinuing) {
  start_training();
  StopSignals stop(with("/tmp/unused", OnSignal::CheckpointContinue), &world());
  drain(stop);
  expect_everywhere(stop.poll(1), false, false, 0);
  if (rank() == 1 % world_size()) raise(SIGINT);
  const StopDecision d = stop.poll(2);
  expect_everywhere(d, true, true, kExitCheckpointedOnSignal);
  EXPECT_EQ(d.signal, "SIGINT");
}

TEST(StopSignals, Usr1WithCheckpointExitStops) {
  start_training();
  StopSignals stop(with("/tmp/unused", OnSignal::CheckpointExit), &world());
  drain(stop);
  expect_everywhere(stop.poll(1), false, false, 0);
  if (rank() == 0) raise(SIGUSR1);
  expect_everywhere(stop.poll(2), true, true, kExitCheckpointedOnSignal);
}

TEST(StopSignals, WithoutCheckpointDirUsr1GoesOnAndSigtermStopsWith143) {
  start_training();
  StopSignals stop(with("", OnSignal::CheckpointExit), &world());
  drain(stop);
  expect_everywhere(stop.poll(1), false, false, 0);
  if (rank() == 0) raise(SIGUSR1);
  expect_everywhere(stop.poll(2), false, false, 0);
  if (rank() == 0) raise(SIGTERM);
  expect_everywhere(stop.poll(3), false, true, 128 + SIGTERM);
}

// An output that failed on one rank (rank 0 writes them) stops every rank after a checkpoint: 75 when
// a retry may succeed (a full file system), 74 when it cannot by itself; without checkpoint.dir 74.
TEST(StopSignals, OutputFailureOnOneRankStopsEveryRank) {
  start_training();
  StopSignals stop(with("/tmp/unused", OnSignal::CheckpointContinue), &world());
  drain(stop);
  expect_everywhere(stop.poll(1), false, false, 0);
  expect_everywhere(stop.poll(2, rank() == 0 ? OutputFailure::Retryable : OutputFailure::None), true, true,
                    kExitCheckpointedOnSignal);
  expect_everywhere(stop.poll(3, rank() == 0 ? OutputFailure::Permanent : OutputFailure::None), true, true,
                    kExitOutputFailed);
  StopSignals without_dir(with("", OnSignal::CheckpointContinue), &world());
  expect_everywhere(without_dir.poll(4, rank() == 0 ? OutputFailure::Retryable : OutputFailure::None), false, true,
                    kExitOutputFailed);
}

}  // namespace
}  // namespace trident::test
