// `trident train` with checkpoints, end to end: real `mpiexec -n N trident train` processes on a
// small deck, compared through their metrics files (every step's loss) and their final checkpoints
// (h5diff: parameters and both moments, exactly).
//
//   TrainResume:  interrupted + resumed == uninterrupted, bit for bit, at 1x1x1, 2x2x2 (8 ranks) and
//                 with virtual stages (several chunks per rank); a fresh start in an empty directory;
//                 a crash between writing and renaming; a damaged newest checkpoint (fallback);
//                 only damaged checkpoints (refused); SIGUSR1; h5py and `ckpt verify` on a checkpoint
//                 of a pipelined run; collective MPI-IO writes at 8 ranks == independent ones.
//   TrainReshard: written at (tp, pp, dp) = (2, 2, 2), resumed at (1,1,1), (4,1,2), (1,4,2), (2,1,4)
//                 and with virtual stages: the losses continue within 1e-5 of the uninterrupted run.
//   TrainLlama:   a Llama-shaped model with its key/value head replicated over TP: bitwise resume, reshard.
//   TrainZero:    the same with ZeRO: zero = 1 and zero = 3 bitwise, zero 0 -> 1 -> 2 -> 1 -> 0 and
//                 2 -> 0, 2x2x2 zero 1 -> 1x1x4 zero 3 -> back, and zero 3 -> serial; and bf16
//                 (the fp32 masters saved, a bitwise resume at zero 2, resharded to zero 3 and serial).
//
// "Interrupted" = a checkpoint directory holding what a run stopped after step 2 (or 3, 4, 5) leaves:
// that step's checkpoint, copied from an uninterrupted run of the same deck, and `latest` naming it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/manifest.hpp"
#include "common/test_support.hpp"
#include "deck/deck.hpp"
#include "backend.hpp"
#include "kernels.hpp"
#include "train/trainer.hpp"

namespace fs = std::filesystem;

namespace trident::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kSteps = 6;

// Byte-level text model small enough for 8 ranks on 2 cores: 4 layers allow pp 4 and pp 2 x 2
// virtual stages; 8 sequences per step give every dp of 1, 2 and 4 whole micro-batches.
constexpr const char* kDeck = R"(
[model]
vocab_size = 256
seq_len = 16
layers = 4
hidden = 32
heads = 4
seed = 11
[train]
steps = 6
micro_batch = 1
global_batch = 8
lr = 1e-3
warmup_steps = 2
weight_decay = 0.1
grad_clip = 1.0
[data]
format = "text"
path = "/usr/share/common-licenses/GPL-3"
order = "shuffle"
[runtime]
peak_tflops = 1
mpi_wait = "poll"
)";

// The temporary root of this process (removed at the end unless TRIDENT_KEEP_TEST_FILES is set).
const std::string& root() {
  static const std::string r = make_temp_dir("trident-train-ckpt");
  return r;
}
class Cleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    if (!std::getenv("TRIDENT_KEEP_TEST_FILES")) fs::remove_all(root());
  }
};
[[maybe_unused]] ::testing::Environment* const cleanup = ::testing::AddGlobalTestEnvironment(new Cleanup);

const std::string& deck_path() {
  static const std::string p = [] {
    const std::string path = root() + "/deck.toml";
    write_file(path, kDeck);
    return path;
  }();
  return p;
}

// A fresh path under the root (not created).
std::string fresh(const std::string& name) {
  static int counter = 0;
  return fmt::format("{}/{}-{}", root(), name, ++counter);
}

std::vector<std::string> mesh(int tp, int pp, int dp, std::vector<std::string> extra = {}) {
  std::vector<std::string> s = {fmt::format("mesh.tp={}", tp), fmt::format("mesh.pp={}", pp),
                                fmt::format("mesh.dp={}", dp)};
  s.insert(s.end(), extra.begin(), extra.end());
  return s;
}
const std::vector<std::string> kVirtual = {"mesh.virtual_stages=2", "mesh.schedule=interleaved"};

struct TrainRun {
  int rc = -1;
  std::string out;                  // the command, then stdout + stderr
  std::map<int64_t, double> loss;   // step -> loss, from the metrics file
  std::string dir;                  // checkpoint.dir
  std::string checkpoint(int64_t step) const { return dir + "/" + checkpoint_file_name(step); }
};

// With TRIDENT_TEST_TRANSPORT=gpu-staged (the gpu-labelled entry) every run trains on the GPU, its ranks
// sharing it through host-staged MPI (runtime.comm = "mpi"); without a GPU that entry skips as a whole.
bool on_gpu() {
  const char* t = std::getenv("TRIDENT_TEST_TRANSPORT");
  return t && std::string(t) == "gpu-staged";
}
class GpuOrSkip : public ::testing::Environment {
 public:
  void SetUp() override {
    if (on_gpu() && !cuda_device_available()) GTEST_SKIP() << "TRIDENT_TEST_TRANSPORT=gpu-staged but no CUDA device";
  }
};
[[maybe_unused]] ::testing::Environment* const gpu_or_skip = ::testing::AddGlobalTestEnvironment(new GpuOrSkip);

// `mpiexec -n np trident train DECK` with checkpoint.dir = dir (none when empty), checkpoints every
// `every` steps, all kept, and a metrics file of its own.
TrainRun train(int np, const std::string& dir, const std::vector<std::string>& sets, int every = 2,
          const std::string& env = "") {
  TrainRun r;
  r.dir = dir;
  const std::string metrics = fresh("metrics") + ".jsonl";
  std::string cmd = fmt::format("{} OPENBLAS_NUM_THREADS=1 {} timeout -k 5 300 {} -n {} {} train {} --set runtime.metrics={}",
                                without_parent_mpi_env(), env, local_mpiexec(), np, trident_binary(), deck_path(),
                                metrics);
  if (!dir.empty())
    cmd += fmt::format(" --set checkpoint.dir={} --set checkpoint.every_steps={} --set checkpoint.keep=0", dir, every);
  for (const auto& s : sets) cmd += " --set " + s;
  if (on_gpu()) cmd += " --set runtime.backend=cuda --set runtime.comm=mpi";
  r.rc = run_command(cmd, &r.out);
  r.out = "$ " + cmd + "\n" + r.out;
  std::ifstream f(metrics);
  for (std::string line; std::getline(f, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("event")) continue;  // the resume marker
    r.loss[j.at("step").get<int64_t>()] = j.at("loss").get<double>();
  }
  return r;
}

// The uninterrupted runs of the deck, 6 steps, checkpoints after steps 2, 4 and 6 (one per process).
const TrainRun& reference(int np, const std::vector<std::string>& sets) {
  static std::map<std::string, std::unique_ptr<TrainRun>> runs;
  const std::string key = fmt::format("{} {}", np, fmt::join(sets, " "));
  auto& r = runs[key];
  if (!r) r = std::make_unique<TrainRun>(train(np, fresh("reference"), sets));
  return *r;
}
const TrainRun& serial_reference() { return reference(1, mesh(1, 1, 1)); }
const TrainRun& parallel_reference() { return reference(8, mesh(2, 2, 2)); }

// A checkpoint directory as a run interrupted after the checkpoint `file` leaves it.
std::string interrupted_dir(const std::vector<std::string>& files) {
  const std::string dir = fresh("interrupted");
  fs::create_directories(dir);
  for (const auto& f : files) fs::copy_file(f, dir + "/" + fs::path(f).filename().string());
  write_file(dir + "/latest", fs::path(files.back()).filename().string() + "\n");
  return dir;
}

// Both runs (completed) have the same loss at every step from `first` to the last, exactly.
void expect_same_losses(const TrainRun& got, const TrainRun& want, int64_t first) {
  ASSERT_EQ(got.rc, 0) << got.out;
  ASSERT_EQ(want.rc, 0) << want.out;
  std::map<int64_t, double> expected;
  for (int64_t s = first; s <= kSteps; ++s) expected[s] = want.loss.at(s);
  EXPECT_EQ(got.loss, expected) << got.out;
}

// The same within `rel` relative (resharded runs sum in another order).
void expect_close_losses(const TrainRun& got, const TrainRun& want, int64_t first, double rel = 1e-5) {
  ASSERT_EQ(got.rc, 0) << got.out;
  ASSERT_EQ(want.rc, 0) << want.out;
  ASSERT_EQ(int64_t(got.loss.size()), kSteps - first + 1) << got.out;
  for (int64_t s = first; s <= kSteps; ++s) {
    ASSERT_TRUE(got.loss.count(s)) << "step " << s << "\n" << got.out;
    EXPECT_NEAR(got.loss.at(s), want.loss.at(s), rel * std::abs(want.loss.at(s))) << "step " << s;
  }
}

// h5diff: the parameters and both moments of two checkpoints are identical (exit 0), element by
// element (no tolerance given).
void expect_same_state(const std::string& a, const std::string& b) {
  for (const char* group : {"/model", "/optim"}) {
    std::string out;
    const int rc = run_command(fmt::format("h5diff -q {} {} {} {}", a, b, group, group), &out);
    EXPECT_EQ(rc, 0) << "h5diff " << a << " " << b << " " << group << ":\n" << out;
  }
}

void expect_resumed_from(const TrainRun& r, const std::string& file, int64_t step) {
  EXPECT_THAT(r.out, HasSubstr(fmt::format("resumed from {} (step {}, written with", file, step))) << r.out;
}

// Flips one bit of element `element` of dataset `name`.
void flip_bit(const std::string& path, const std::string& name, int64_t element) {
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  ASSERT_GE(d, 0) << name;
  const haddr_t offset = H5Dget_offset(d);
  H5Dclose(d);
  H5Fclose(f);
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(std::streamoff(offset + 4 * element + 1));
  char c = 0;
  file.get(c);
  file.seekp(std::streamoff(offset + 4 * element + 1));
  file.put(char(c ^ 0x04));
}

// Rewrites an int64 root attribute and reseals the manifest, as another writer (a future trident)
// would have written the file: without the reseal the edit is refused as damage.
void set_root_attribute(const std::string& path, const char* name, int64_t value) {
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  hid_t a = H5Aopen(f, name, H5P_DEFAULT);
  ASSERT_GE(a, 0) << name;
  H5Awrite(a, H5T_NATIVE_INT64, &value);
  H5Aclose(a);
  H5Fclose(f);
  ckpt::reseal_checkpoint(path);
}

// ---------------------------------------------------------------------------------------------
// Same layout: bit for bit.

TEST(TrainResume, FreshStartInAnEmptyDirectoryMatchesARunWithoutCheckpoints) {
  const TrainRun& ref = serial_reference();  // its checkpoint.dir did not exist
  ASSERT_EQ(ref.rc, 0) << ref.out;
  EXPECT_THAT(ref.out, HasSubstr(fmt::format("no checkpoint in {}: starting fresh", ref.dir)));
  for (int64_t s : {2, 4, 6}) EXPECT_TRUE(fs::exists(ref.checkpoint(s))) << s;
  EXPECT_EQ(latest_checkpoint(ref.dir), ref.checkpoint(6));
  // Writing checkpoints leaves the training itself untouched.
  const TrainRun plain = train(1, "", mesh(1, 1, 1));
  expect_same_losses(plain, ref, 1);
}

// A run resumed from `ref`'s checkpoint of step 2 (in a directory holding only that one) finishes
// exactly as `ref` did: the same losses from step 3 and the same final parameters and moments.
void expect_bitwise_resume(const TrainRun& ref, int ranks, const std::vector<std::string>& sets) {
  const std::string dir = interrupted_dir({ref.checkpoint(2)});
  const TrainRun resumed = train(ranks, dir, sets);
  expect_same_losses(resumed, ref, 3);
  expect_resumed_from(resumed, dir + "/step_00000002.h5", 2);
  expect_same_state(resumed.checkpoint(6), ref.checkpoint(6));
}

TEST(TrainResume, SerialInterruptedAndResumedEqualsUninterrupted) {
  expect_bitwise_resume(serial_reference(), 1, mesh(1, 1, 1));
}

TEST(TrainResume, Tp2Pp2Dp2InterruptedAndResumedEqualsUninterrupted) {
  expect_bitwise_resume(parallel_reference(), 8, mesh(2, 2, 2));
}

// Two chunks per rank (several RankShards), collective transfers (mpi_wait = block).
TEST(TrainResume, VirtualStagesInterruptedAndResumedEqualsUninterrupted) {
  auto sets = mesh(1, 2, 1, kVirtual);
  sets.push_back("runtime.mpi_wait=block");
  expect_bitwise_resume(reference(2, sets), 2, sets);
}

// Collective MPI-IO writes at 8 ranks (tp 2 x pp 2 x dp 2: several ranks write hyperslabs of every
// tensor): the checkpoint of step 2 equals an independently written one of the same run, bit for bit.
// One write of a 2-layer model: oversubscribed, a collective write costs ~0.2 s per dataset here
// (ROMIO's internal collectives spin; 40 s for the 4-layer deck, 21 s for 2 layers), which is why poll
// runs write independently by default.
TEST(TrainResume, CollectiveIoAt8RanksWritesTheSameCheckpoint) {
  auto sets = mesh(2, 2, 2, {"model.layers=2", "train.steps=2"});
  const TrainRun independent = train(8, fresh("independent"), sets, 2, "TRIDENT_CHECKPOINT_IO=independent");
  ASSERT_EQ(independent.rc, 0) << independent.out;
  EXPECT_THAT(independent.out, HasSubstr("s (independent), flush")) << independent.out;
  const TrainRun collective = train(8, fresh("collective"), sets, 2, "TRIDENT_CHECKPOINT_IO=collective");
  ASSERT_EQ(collective.rc, 0) << collective.out;
  EXPECT_EQ(collective.loss.size(), 2u) << collective.out;
  EXPECT_THAT(collective.out, HasSubstr("s (collective), flush")) << collective.out;
  expect_same_state(collective.checkpoint(2), independent.checkpoint(2));
}

// ---------------------------------------------------------------------------------------------
// Crashes and damage.

TEST(TrainResume, CrashBetweenWritingAndRenamingLeavesLatestValid) {
  const TrainRun& ref = serial_reference();
  const std::string dir = interrupted_dir({ref.checkpoint(2)});
  // Resumes after step 2, trains steps 3 and 4, dies writing step 4's checkpoint before the rename.
  const TrainRun crashed = train(1, dir, mesh(1, 1, 1), 2, "TRIDENT_INJECT_FAULT=checkpoint-crash:before_rename");
  // The process _Exit(86)s; how the launcher reports that varies (Hydra has said 86, and 1 with
  // "Hangup"), so the test holds it to a failed run that printed the crash.
  EXPECT_NE(crashed.rc, 0) << crashed.out;
  EXPECT_THAT(crashed.out, HasSubstr("TRIDENT_INJECT_FAULT=checkpoint-crash:before_rename: exiting as a crash would"));
  EXPECT_TRUE(fs::exists(dir + "/step_00000004.h5.tmp"));
  EXPECT_FALSE(fs::exists(dir + "/step_00000004.h5"));
  EXPECT_EQ(latest_checkpoint(dir), dir + "/step_00000002.h5");
  for (const auto& v : verify_checkpoint(latest_checkpoint(dir))) EXPECT_TRUE(v.ok) << v.dataset << " " << v.error;

  const TrainRun resumed = train(1, dir, mesh(1, 1, 1));
  expect_same_losses(resumed, ref, 3);
  expect_resumed_from(resumed, dir + "/step_00000002.h5", 2);
  EXPECT_FALSE(fs::exists(dir + "/step_00000004.h5.tmp"));  // removed by the next write
  expect_same_state(resumed.checkpoint(6), ref.checkpoint(6));
}

TEST(TrainResume, DamagedNewestCheckpointFallsBackToThePreviousAndSaysSo) {
  const TrainRun& ref = serial_reference();
  const std::string dir = interrupted_dir({ref.checkpoint(2), ref.checkpoint(4)});
  const std::string dataset = "/optim/exp_avg/transformer.h.1.mlp.c_fc.weight";
  flip_bit(dir + "/step_00000004.h5", dataset, 100);

  const TrainRun resumed = train(1, dir, mesh(1, 1, 1));
  expect_same_losses(resumed, ref, 3);
  EXPECT_THAT(resumed.out, HasSubstr(fmt::format("{}/step_00000004.h5 is not usable", dir)));
  EXPECT_THAT(resumed.out, HasSubstr("checksum mismatch in dataset " + dataset));
  EXPECT_THAT(resumed.out, HasSubstr("falling back to the previous checkpoint, " + dir + "/step_00000002.h5"));
  expect_resumed_from(resumed, dir + "/step_00000002.h5", 2);
  // The rerun's own checkpoint of step 4 replaced the damaged file.
  expect_same_state(dir + "/step_00000004.h5", ref.checkpoint(4));
}

TEST(TrainResume, OnlyDamagedCheckpointsAreRefusedNotRestartedFromScratch) {
  const TrainRun& ref = serial_reference();
  const std::string dir = interrupted_dir({ref.checkpoint(2), ref.checkpoint(4)});
  fs::resize_file(dir + "/step_00000002.h5", fs::file_size(dir + "/step_00000002.h5") * 6 / 10);
  set_root_attribute(dir + "/step_00000004.h5", "format_version", kCheckpointFormatVersion + 1);

  const TrainRun refused = train(1, dir, mesh(1, 1, 1));
  EXPECT_EQ(refused.rc, 2) << refused.out;
  EXPECT_THAT(refused.out, HasSubstr(dir + ": none of its 2 checkpoint(s) is valid"));
  EXPECT_THAT(refused.out, HasSubstr(fmt::format("{}/step_00000004.h5: format version {} is newer", dir,
                                                 kCheckpointFormatVersion + 1)));
  EXPECT_THAT(refused.out, HasSubstr(dir + "/step_00000002.h5: truncated file"));
  EXPECT_TRUE(refused.loss.empty()) << refused.out;  // not a single step trained
  EXPECT_EQ(list_checkpoints(dir).size(), 2u);
}

// Bad checkpoint.dir: refused at start-up, naming the deck key.
TEST(TrainResume, UnusableCheckpointDirectoryFailsAtStartUp) {
  const std::string file = fresh("not-a-dir");
  write_file(file, "x");
  const TrainRun r = train(1, file, mesh(1, 1, 1));
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr(fmt::format("[checkpoint] dir = \"{}\" is a regular file, not a directory", file)));
  EXPECT_TRUE(r.loss.empty()) << r.out;
}

// SIGUSR1 asks for a checkpoint at the end of the current step (in-process: the signal is raised
// before step 1, so step 1 is checkpointed besides the end of training; checkpoint-continue goes on).
TEST(TrainResume, Sigusr1RequestsACheckpoint) {
  Config cfg = parse_deck(kDeck, "test.toml", {"runtime.mpi_wait=block", "runtime.on_signal=checkpoint-continue"});
  cfg.checkpoint.dir = fresh("signal");
  auto kernels = make_kokkos_kernels();
  {
    Trainer trainer(cfg, *kernels);
    std::raise(SIGUSR1);
    trainer.run();
  }
  EXPECT_EQ(list_checkpoints(cfg.checkpoint.dir),
            (std::vector<std::string>{cfg.checkpoint.dir + "/step_00000006.h5", cfg.checkpoint.dir + "/step_00000001.h5"}));
}

TEST(TrainResume, H5pyAndVerifyReadACheckpointOfAPipelinedRun) {
  const TrainRun& ref = parallel_reference();
  ASSERT_EQ(ref.rc, 0) << ref.out;
  const std::string path = ref.checkpoint(6);
  std::string out;
  ASSERT_EQ(run_command("/usr/bin/python3 -c 'import h5py, numpy'", &out), 0) << "h5py is needed: " << out;
  // Expected: the Hugging Face GPT-2 names and shapes of the deck's model.
  const Config cfg = parse_deck(kDeck, "test.toml");
  const GptShapes shapes = GptShapes::from(cfg.model, 1);
  const ParameterLayout global(shapes, 0, 1);
  nlohmann::json expected;
  for (const auto& t : global.tensors()) expected[t.name] = hf_shape(t, shapes);
  const std::string json = fresh("expected") + ".json";
  write_file(json, expected.dump());
  EXPECT_EQ(run_command(fmt::format("/usr/bin/python3 {} {} {}", TRIDENT_H5PY_CHECK, path, json), &out), 0) << out;
  EXPECT_THAT(out, HasSubstr(fmt::format("OK {} datasets", 3 * global.tensors().size())));

  EXPECT_EQ(run_command(fmt::format("{} {} ckpt verify {}", without_parent_mpi_env(), trident_binary(), path), &out), 0)
      << out;
  EXPECT_THAT(out, HasSubstr(fmt::format("all {} checksums verified", 3 * global.tensors().size() + 1)));
}

// ---------------------------------------------------------------------------------------------
// Resharding: written at (2, 2, 2), resumed elsewhere.

struct Target {
  const char* name;
  int np, tp, pp, dp;
};
class TrainReshard : public ::testing::TestWithParam<Target> {};

TEST_P(TrainReshard, LossesContinueWithinTolerance) {
  const Target t = GetParam();
  const TrainRun& ref = parallel_reference();
  const std::string dir = interrupted_dir({ref.checkpoint(2)});
  const TrainRun resumed = train(t.np, dir, mesh(t.tp, t.pp, t.dp));
  expect_close_losses(resumed, ref, 3);
  expect_resumed_from(resumed, dir + "/step_00000002.h5", 2);
  EXPECT_THAT(resumed.out, HasSubstr("written with tp 2 pp 2 dp 2 zero 0 virtual_stages 1 on 8 ranks"));
}

INSTANTIATE_TEST_SUITE_P(From222, TrainReshard,
                         ::testing::Values(Target{"serial", 1, 1, 1, 1}, Target{"tp4_dp2", 8, 4, 1, 2},
                                           Target{"pp4_dp2", 8, 1, 4, 2}, Target{"tp2_dp4", 8, 2, 1, 4}),
                         [](const auto& info) { return std::string(info.param.name); });

// Into two chunks per rank, and the checkpoint those write (several shards per rank) on to serial.
TEST(TrainReshardVirtual, IntoVirtualStagesAndOnToSerial) {
  const TrainRun& ref = parallel_reference();
  const TrainRun virtual_run = train(8, interrupted_dir({ref.checkpoint(2)}), mesh(2, 2, 2, kVirtual));
  expect_close_losses(virtual_run, ref, 3);
  const TrainRun serial = train(1, interrupted_dir({virtual_run.checkpoint(4)}), mesh(1, 1, 1));
  expect_close_losses(serial, ref, 5);
  EXPECT_THAT(serial.out, HasSubstr("written with tp 2 pp 2 dp 2 zero 0 virtual_stages 2 on 8 ranks"));
}

// ---------------------------------------------------------------------------------------------
// ZeRO (needs mesh.zero > 0 with dp > 1 in the Trainer).

TEST(TrainZero, Zero1InterruptedAndResumedEqualsUninterrupted) {
  const auto sets = mesh(2, 2, 2, {"mesh.zero=1"});
  expect_bitwise_resume(reference(8, sets), 8, sets);
}

// zero 0 -> 1 -> 2 -> 1 -> 0, and 2 -> 0, each continuing the uninterrupted zero = 0 run.
TEST(TrainZero, ReshardZero0To1To2AndBack) {
  const TrainRun& ref = parallel_reference();
  auto zero = [](int z) { return mesh(2, 2, 2, {fmt::format("mesh.zero={}", z)}); };
  const TrainRun z1 = train(8, interrupted_dir({ref.checkpoint(2)}), zero(1), 1);
  expect_close_losses(z1, ref, 3);
  const TrainRun z2 = train(8, interrupted_dir({z1.checkpoint(3)}), zero(2), 1);
  expect_close_losses(z2, ref, 4);
  const TrainRun z1b = train(8, interrupted_dir({z2.checkpoint(4)}), zero(1), 1);
  expect_close_losses(z1b, ref, 5);
  const TrainRun z0 = train(8, interrupted_dir({z1b.checkpoint(5)}), zero(0), 1);
  expect_close_losses(z0, ref, 6);
  const TrainRun z2to0 = train(8, interrupted_dir({z2.checkpoint(5)}), zero(0), 1);
  expect_close_losses(z2to0, ref, 6);
}

// ZeRO-3 keeps a partition of the parameters: a checkpoint gathers them, a resume keeps its range.
// tp 2 x dp 2 at 4 ranks (two micro-batches accumulated per rank), bit for bit.
TEST(TrainZero, Zero3InterruptedAndResumedEqualsUninterrupted) {
  const auto sets = mesh(2, 1, 2, {"mesh.zero=3"});
  expect_bitwise_resume(reference(4, sets), 4, sets);
}

// 2x2x2 zero 1 -> 1x1x4 zero 3 -> 2x2x2 zero 1, and zero 3 -> serial zero 0, each continuing the
// uninterrupted 2x2x2 zero 1 run.
TEST(TrainZero, ReshardZero1To3AndBackAndZero3ToSerial) {
  const auto z1_sets = mesh(2, 2, 2, {"mesh.zero=1"});
  const TrainRun& ref = reference(8, z1_sets);
  const TrainRun z3 = train(4, interrupted_dir({ref.checkpoint(2)}), mesh(1, 1, 4, {"mesh.zero=3"}), 1);
  expect_close_losses(z3, ref, 3);
  EXPECT_THAT(z3.out, HasSubstr("written with tp 2 pp 2 dp 2 zero 1 virtual_stages 1 on 8 ranks"));
  const TrainRun back = train(8, interrupted_dir({z3.checkpoint(4)}), z1_sets, 1);
  expect_close_losses(back, ref, 5);
  EXPECT_THAT(back.out, HasSubstr("written with tp 1 pp 1 dp 4 zero 3 virtual_stages 1 on 4 ranks"));
  const TrainRun serial = train(1, interrupted_dir({z3.checkpoint(5)}), mesh(1, 1, 1), 1);
  expect_close_losses(serial, ref, 6);
}

// train.precision = "bf16": the model computes with a bf16 working copy and the fp32 masters live in
// the optimizers' ZeRO ranges. A checkpoint saves the masters (gathered over DP): most of its parameter
// values are not bf16 values, which a checkpoint of the working copy would be, every one. Resumed at
// zero 2 (the masters back in their ranges, the working copy their rounding) bit for bit; resharded to
// zero 3 (the partitions are the masters) and to one rank. The reshard bound is bf16's layout bound
// (test_matmul_precision_parallel.cpp: reordered fp32 sums flip bf16 roundings; 3e-4 on losses).
TEST(TrainZero, Bf16MastersAreSavedResumeBitwiseAndReshard) {
  const auto sets = mesh(1, 1, 2, {"mesh.zero=2", "train.precision=bf16"});
  const TrainRun& ref = reference(2, sets);
  ASSERT_EQ(ref.rc, 0) << ref.out;
  hid_t f = H5Fopen(ref.checkpoint(2).c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hid_t d = H5Dopen2(f, "/model/transformer.h.0.mlp.c_fc.weight", H5P_DEFAULT);
  ASSERT_GE(d, 0);
  hid_t space = H5Dget_space(d);
  std::vector<float> values(size_t(H5Sget_simple_extent_npoints(space)));
  H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
  H5Sclose(space);
  H5Dclose(d);
  H5Fclose(f);
  const auto bf16_exact = std::count_if(values.begin(), values.end(), [](float x) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    return (u & 0xffffu) == 0;
  });
  EXPECT_LT(double(bf16_exact), 0.1 * double(values.size())) << "the checkpoint holds the bf16 working copy";
  std::printf("[bf16 masters] %lld of %zu saved values are bf16 values\n", (long long)bf16_exact, values.size());

  expect_bitwise_resume(ref, 2, sets);
  const TrainRun z3 = train(2, interrupted_dir({ref.checkpoint(2)}), mesh(1, 1, 2, {"mesh.zero=3", "train.precision=bf16"}), 1);
  expect_close_losses(z3, ref, 3, 3e-4);
  const TrainRun serial = train(1, interrupted_dir({ref.checkpoint(2)}), mesh(1, 1, 1, {"train.precision=bf16"}), 1);
  expect_close_losses(serial, ref, 3, 3e-4);
}

// ---------------------------------------------------------------------------------------------
// A Llama-shaped model (RMSNorm, RoPE, SwiGLU, one key/value head): at tp 2 its k_proj and v_proj are
// replicated on both ranks and written once. Resumed bitwise at tp 2, resharded to serial and to tp 4
// (the key/value head replicated on four ranks) within the reshard tolerance.
TEST(TrainLlama, ReplicatedKeyValueHeadsResumeBitwiseAndReshard) {
  const std::vector<std::string> llama = {"model.architecture=llama", "model.kv_heads=1", "model.ffn_hidden=64"};
  const auto sets = mesh(2, 1, 1, llama);
  const TrainRun& ref = reference(2, sets);
  ASSERT_EQ(ref.rc, 0) << ref.out;
  expect_bitwise_resume(ref, 2, sets);
  for (const int tp : {1, 4}) {
    SCOPED_TRACE(fmt::format("resumed at tp {}", tp));
    const TrainRun resumed = train(tp, interrupted_dir({ref.checkpoint(2)}), mesh(tp, 1, 1, llama));
    expect_close_losses(resumed, ref, 3);
  }
}

}  // namespace
}  // namespace trident::test
