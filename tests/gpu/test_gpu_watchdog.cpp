// A stalled GPU under an NCCL operation ends the job: nccl_stall_helper (see its header) stalls the
// compute stream under an all-reduce with runtime.collective_timeout_s = 2; the job must end with exit
// code 4 within seconds (not the 120 s of the stall), with one message naming the operation, the group,
// the limit and the step. Skips without a GPU.
// The helper runs as a singleton MPI process, not under mpiexec -n 1: Hydra (MPICH 4.0) loses the exit
// code of a one-process job that ends without MPI_Finalize when its proxy reaps the process before it
// has read its output to the end (mpiexec then reports 1: 4 runs in 40 here, more on a busy machine).
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "backend.hpp"
#include "common/test_support.hpp"

namespace trident::test {
namespace {

TEST(GpuWatchdog, StalledNcclAllReduceEndsTheJobNamingIt) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device (or a build without CUDA)";
  const std::string cmd = without_parent_mpi_env() + " timeout -k 5 60 " + TRIDENT_NCCL_STALL_HELPER;
  const auto t0 = std::chrono::steady_clock::now();
  std::string out;
  const int rc = run_command(cmd, &out);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  SCOPED_TRACE("command: " + cmd + "\noutput:\n" + out);
  EXPECT_EQ(rc, 4) << "not the watchdog's exit code";
  EXPECT_LT(seconds, 20.0) << "the watchdog did not end the job within its limit";
  EXPECT_NE(out.find("watchdog: all_reduce on group 'tp'"), std::string::npos);
  EXPECT_NE(out.find("runtime.collective_timeout_s = 2"), std::string::npos);
  EXPECT_NE(out.find("at step 3"), std::string::npos);
  EXPECT_EQ(out.find("the stalled all-reduce completed"), std::string::npos);
}

}  // namespace
}  // namespace trident::test
