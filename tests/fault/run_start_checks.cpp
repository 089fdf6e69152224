// What `train` checks before it allocates or trains: output paths it will write (metrics, trace) and
// whether the layout fits in memory. Each failure must come before step 1, with exit status 2.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <string>

#include "app/memory_check.hpp"
#include "common/test_support.hpp"
#include "deck/deck.hpp"
#include "fault/run_job.hpp"

namespace trident::test {
namespace {

struct TrainRun {
  int status;
  std::string out;
};

TrainRun train(const std::string& deck_text, const std::string& args = "", const std::string& prefix = "") {
  const std::string dir = make_temp_dir("trident-start");
  write_file(dir + "/deck.toml", deck_text);
  TrainRun r;
  r.status = run_command(prefix + without_parent_mpi_env() + " OPENBLAS_NUM_THREADS=1 timeout -k 2 120 " + trident_binary() + " train " + dir +
                             "/deck.toml --set train.steps=3 " + args,
                         &r.out);
  return r;
}

// A path under a regular file: its parent directory can never be created.
std::string impossible_path(const std::string& name) {
  const std::string dir = make_temp_dir("trident-start");
  write_file(dir + "/file", "not a directory\n");
  return dir + "/file/" + name;
}

TEST(StartChecks, MetricsPathWhoseParentCannotBeCreatedFailsBeforeStepOne) {
  const std::string path = impossible_path("m.jsonl");
  const TrainRun r = train(small_deck(1, 1, 1), "--set runtime.metrics=" + path);
  EXPECT_EQ(r.status, 2) << r.out;  // was 1: "internal error: filesystem error"
  EXPECT_NE(r.out.find("[runtime] metrics = \"" + path + "\": cannot create the directory"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("step 1/"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("internal error"), std::string::npos) << r.out;
}

TEST(StartChecks, TracePathThatCannotBeWrittenFailsBeforeStepOne) {
  // Before the fix the trace was opened after the last step: the run trained, then failed.
  const std::string path = impossible_path("trace.json");
  const TrainRun r = train(small_deck(1, 1, 1), "--set runtime.trace=" + path);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("[runtime] trace = \"" + path + "\": cannot create the directory"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("step 1/"), std::string::npos) << r.out;
}

// A hard open-file limit too low for MPI: one clear message and exit 2 (before the fix, MPICH's raw
// error stack); a low soft limit under a higher hard one is raised and the run goes on.
TEST(StartChecks, OpenFileLimitTooLowForMpiIsNamed) {
  TrainRun r = train(small_deck(1, 1, 1), "", "ulimit -n 32; ");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("trident: the open-file limit is 32 (ulimit -n; hard limit 32), below the 64 descriptors"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("Fatal error in"), std::string::npos) << r.out;  // MPICH's error stack
  r = train(small_deck(1, 1, 1), "", "ulimit -S -n 32; ");
  EXPECT_EQ(r.status, 0) << r.out;
}

TEST(StartChecks, MisspeltFaultInjectionPointIsRefusedBeforeStepOne) {
  // A failure test whose fault name is misspelt would otherwise run clean and test nothing.
  const TrainRun r = train(small_deck(1, 1, 1), "", "export TRIDENT_INJECT_FAULT=pipeline-stag:0; ");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("'pipeline-stag' is not a fault injection point"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("step 1/"), std::string::npos) << r.out;
}

// About 13 billion parameters: 16 bytes each for weights, gradients and Adam moments alone, far more
// than any machine that runs these tests has.
const char* kHugeModel = R"([model]
vocab_size = 50257
seq_len = 1024
layers = 64
hidden = 4096
heads = 32

[train]
micro_batch = 1
global_batch = 1

[data]
format = "text"
path = "/usr/share/common-licenses/GPL-3"
)";

TEST(StartChecks, ModelTooBigForMemoryIsRefusedWithBothFigures) {
  const TrainRun r = train(kHugeModel);
  EXPECT_EQ(r.status, 2) << r.out;  // was: internal error from the allocator, or the OOM killer
  EXPECT_NE(r.out.find("not enough memory to train this layout: the planner estimates"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("is available per rank"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--set train.recompute=full"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("more ranks along mesh.pp or mesh.tp"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--set runtime.memory_check=false"), std::string::npos) << r.out;
}

TEST(StartChecks, AllocationFailureAfterTheOverrideNamesWhatWasAllocated) {
  // runtime.memory_check = false lets the run try; an address-space limit makes the failure certain.
  const TrainRun r = train(kHugeModel, "--set runtime.memory_check=false", "ulimit -v 6000000; ");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("out of memory while allocating "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("internal error"), std::string::npos) << r.out;
}

TEST(StartChecks, EstimateCoversTheModelStates) {
  const Config cfg = parse_deck(kHugeModel, "deck.toml");
  // fp32 on one rank: weights 4 + gradients 4 + Adam moments 8 bytes per parameter (start-up keeps no
  // whole-model copy: each rank initialises its own slices in place).
  const double params = double(parameter_count(cfg.model));
  EXPECT_GE(estimated_rank_bytes(cfg), 16.0 * params);
  const auto refusal = memory_refusal(cfg, 10e9, 4e9, 8e9, 2);
  ASSERT_TRUE(refusal);
  EXPECT_NE(refusal->find("the planner estimates 10.00 GB per rank, but 4.00 GB is available per rank (8.00 GB "
                          "available on this node, shared by 2 rank(s))"),
            std::string::npos)
      << *refusal;
  EXPECT_FALSE(memory_refusal(cfg, 4e9, 4e9, 8e9, 2));
}

}  // namespace
}  // namespace trident::test
