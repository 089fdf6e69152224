// Checkpoints: round trips (bitwise), interrupted + resumed == uninterrupted (bitwise), resharding
// (tp = world <-> serial, tp 2 with replicas, ZeRO-style optimizer partitions), corruption (flipped
// bit, truncation, missing file and dataset, wrong shape, future format version), atomicity (crashes
// injected before the rename and before `latest`), auto-resume fallback, keep, h5py, export, CLI.
// Registered at 1, 2 and 4 ranks; the TP group is the whole world (mesh.tp = world size).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <hdf5.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/manifest.hpp"
#include "common/test_support.hpp"
#include "safetensors/safetensors.hpp"
#include "kernels.hpp"
#include "parallel/parallel_test_util.hpp"
#include "train/progress.hpp"

namespace fs = std::filesystem;

namespace trident::test {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kVocab = 1009;  // prime: padded to 1016 (vocab_pad_to 8), so padding rows exist

int rank() { return world_rank(); }
int world() { return world_size(); }

std::vector<std::string> temp_dirs;  // removed at the end unless TRIDENT_KEEP_TEST_FILES is set

// A temporary directory shared by all ranks (created by rank 0).
std::string shared_dir(const std::string& prefix) {
  std::string d;
  if (rank() == 0) d = make_temp_dir(prefix);
  int n = int(d.size());
  MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
  d.resize(size_t(n));
  MPI_Bcast(d.data(), n, MPI_CHAR, 0, MPI_COMM_WORLD);
  temp_dirs.push_back(d);
  return d;
}

void barrier() { MPI_Barrier(MPI_COMM_WORLD); }

// Sets an environment variable for a scope (the same on every rank).
struct ScopedEnv {
  std::string name;
  ScopedEnv(const char* n, const char* value) : name(n) { setenv(n, value, 1); }
  ~ScopedEnv() { unsetenv(name.c_str()); }
};

std::vector<std::string> deck_overrides(int tp, std::vector<std::string> extra = {}) {
  std::vector<std::string> o = {fmt::format("mesh.tp={}", tp), "model.vocab_pad_to=8", "runtime.peak_tflops=1"};
  o.insert(o.end(), extra.begin(), extra.end());
  return o;
}

// A trainer of the small test deck with tp ranks (tp = 1: a serial trainer on every rank).
struct Session {
  Config cfg;
  std::unique_ptr<ParallelMesh> mesh;
  std::unique_ptr<Kernels> kernels;
  std::unique_ptr<Trainer> trainer;
  std::vector<double> losses;

  explicit Session(int tp, std::vector<std::string> extra = {}) {
    cfg = small_deck(kVocab, deck_overrides(tp, std::move(extra)));
    if (tp > 1) mesh = std::make_unique<ParallelMesh>(MPI_COMM_WORLD, cfg.mesh, cfg.runtime.mpi_wait);
    kernels = make_kokkos_kernels();
    trainer = std::make_unique<Trainer>(cfg, *kernels, mesh.get());
  }
  void steps(int64_t first, int64_t last) {
    for (int64_t s = first; s <= last; ++s) losses.push_back(trainer->train_step(s).loss);
  }
  const ParameterLayout& layout() { return trainer->model().layout(); }
  int64_t n() { return layout().total(); }
};

// Host copies of a state and the RankShard over them.
struct HostState {
  std::vector<float> params, m, v;
  RankShard shard;
  HostState() = default;
  HostState(const HostState& o) : params(o.params), m(o.m), v(o.v), shard(o.shard) { point(); }
  HostState(HostState&&) = default;  // vectors keep their buffers: the shard's pointers stay valid
  HostState& operator=(HostState&&) = default;
  HostState& operator=(const HostState&) = delete;
  void point() {
    shard.params = params.data();
    shard.exp_avg = m.data();
    shard.exp_avg_sq = v.data();
  }
};

HostState download(Session& s) {
  HostState h;
  const int64_t n = s.n();
  h.params.resize(n);
  h.m.resize(n);
  h.v.resize(n);
  s.kernels->copy_to_host(h.params.data(), s.trainer->model().params(), n);
  s.kernels->copy_to_host(h.m.data(), s.trainer->optimizer().exp_avg(), n);
  s.kernels->copy_to_host(h.v.data(), s.trainer->optimizer().exp_avg_sq(), n);
  h.shard.layout = &s.layout();
  h.point();
  return h;
}

HostState empty_state(const ParameterLayout& layout) {
  HostState h;
  h.params.assign(layout.total(), -1.f);  // garbage, so a missed element shows
  h.m.assign(layout.total(), -1.f);
  h.v.assign(layout.total(), -1.f);
  h.shard.layout = &layout;
  h.point();
  return h;
}

void upload(Session& s, const HostState& h) {
  const int64_t n = s.n();
  s.kernels->copy_to_device(s.trainer->model().params(), h.params.data(), n);
  s.kernels->copy_to_device(s.trainer->optimizer().exp_avg(), h.m.data(), n);
  s.kernels->copy_to_device(s.trainer->optimizer().exp_avg_sq(), h.v.data(), n);
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The whole-model host buffers (tp = 1 layout) of a session, gathered over its TP group.
struct Whole {
  std::vector<float> params, m, v;
};
Whole gather(Session& s) {
  auto& model = s.trainer->model();
  return {model.gather_global(model.params()), model.gather_global(s.trainer->optimizer().exp_avg()),
          model.gather_global(s.trainer->optimizer().exp_avg_sq())};
}

// One tp = world run of 5 steps shared by the tests (trainers are the slow part at 4 ranks on 2
// cores): the host state after steps 1, 2 and 3, the whole model after step 3 and 5, the losses.
struct Reference {
  std::unique_ptr<Session> session;
  HostState h1, h2, h3;
  Whole whole3, whole5;
  std::vector<double> losses;  // steps 1..5
  const Config& cfg() const { return session->cfg; }
  const ParameterLayout& layout() const { return session->layout(); }
};

std::unique_ptr<Reference> ref;

// Frees the reference run before the test main finalizes Kokkos (its device buffers must go first)
// and removes the temporary directories.
class ReferenceCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    ref.reset();
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank() == 0 && !std::getenv("TRIDENT_KEEP_TEST_FILES"))
      for (const auto& d : temp_dirs) fs::remove_all(d);
  }
};
[[maybe_unused]] ::testing::Environment* const cleanup = ::testing::AddGlobalTestEnvironment(new ReferenceCleanup);

const Reference& reference() {
  if (!ref) {
    ref = std::make_unique<Reference>();
    ref->session = std::make_unique<Session>(world());
    Session& s = *ref->session;
    s.steps(1, 1);
    ref->h1 = download(s);
    s.steps(2, 2);
    ref->h2 = download(s);
    s.steps(3, 3);
    ref->h3 = download(s);
    ref->whole3 = gather(s);
    s.steps(4, 5);
    ref->whole5 = gather(s);
    ref->losses = s.losses;
  }
  return *ref;
}

// Writes `state` as the checkpoint of `step` (the reference's deck unless cfg is given).
std::string write(const HostState& state, const std::string& dir, int64_t step, const WriteOptions& o = {},
                  const Config* cfg_in = nullptr) {
  Config cfg = cfg_in ? *cfg_in : reference().cfg();
  cfg.checkpoint.dir = dir;
  const double loss = step >= 1 && step <= 5 ? reference().losses[step - 1] : NAN;
  return write_checkpoint(dir, cfg, state.shard, progress_after_step(cfg, step, loss), MPI_COMM_WORLD, o);
}

HostState load(const std::string& path, const ParameterLayout& layout, CheckpointHeader* header = nullptr) {
  HostState r = empty_state(layout);
  const CheckpointHeader h = load_checkpoint(path, reference().cfg(), r.shard, MPI_COMM_WORLD);
  if (header) *header = h;
  return r;
}

// The checkpoint at `path` read whole into `layout` with every element owned by rank 0 (the serial
// layout under ZeRO: the whole model, to compare with the reference's).
HostState load_whole(const std::string& path, const ParameterLayout& layout) {
  HostState r = empty_state(layout);
  r.shard.params_owner = r.shard.optim_owner = rank() == 0;
  load_checkpoint(path, reference().cfg(), r.shard, MPI_COMM_WORLD);
  return r;
}

// Elements [begin, end) of `whole`.
std::vector<float> slice(const std::vector<float>& whole, int64_t begin, int64_t end) {
  return std::vector<float>(whole.begin() + begin, whole.begin() + end);
}

// The error message of a CheckpointError thrown by f ("" when none).
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

// Flips one bit of element `element` of dataset `name` (rank 0 edits the file; all ranks wait).
void flip_bit(const std::string& path, const std::string& name, int64_t element) {
  if (rank() == 0) {
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
    const haddr_t offset = H5Dget_offset(d);
    H5Dclose(d);
    H5Fclose(f);
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(std::streamoff(offset + 4 * element + 2));
    char c = 0;
    file.get(c);
    c ^= 0x10;
    file.seekp(std::streamoff(offset + 4 * element + 2));
    file.put(c);
  }
  barrier();
}

// Rewrites an int64 root attribute (rank 0) and reseals the manifest, as another writer (a future
// trident) would have written the file: without the reseal the edit is refused as damage.
void set_root_attribute(const std::string& path, const char* name, int64_t value) {
  if (rank() == 0) {
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, &value);
    H5Aclose(a);
    H5Fclose(f);
    ckpt::reseal_checkpoint(path);
  }
  barrier();
}

Config with_checkpointing(Config cfg, const std::string& dir, const std::string& resume = "auto", int64_t keep = 2) {
  cfg.checkpoint.dir = dir;
  cfg.checkpoint.resume = resume;
  cfg.checkpoint.keep = keep;
  return cfg;
}

// ---------------------------------------------------------------------------------------------
// Round trips and resharding. The test decks poll (runtime.mpi_wait), so data transfers are
// independent by default; the collective ones (the default of real runs) are checked by setting
// TRIDENT_CHECKPOINT_IO, at 1 and 2 ranks (at 4 ranks on 2 cores MPI-IO's blocking collectives
// spin against each other for minutes).

// This rank's ZeRO-style range [begin, end) of `total` elements: uneven, odd boundaries so that the
// ranges cut rows of every kind of tensor (transposed Conv1D included).
std::pair<int64_t, int64_t> odd_range(int64_t total) {
  const int64_t b = total * rank() / world() + (rank() > 0 ? 37 : 0);
  const int64_t e = rank() + 1 == world() ? total : total * (rank() + 1) / world() + 37;
  return {b, e};
}

// A shard of `layout` over these buffers, its optimizer range `range`.
RankShard range_shard(const ParameterLayout& layout, float* params, float* m, float* v, std::pair<int64_t, int64_t> range) {
  RankShard z;
  z.layout = &layout;
  z.params = params;
  z.exp_avg = m;
  z.exp_avg_sq = v;
  z.optim_begin = range.first;
  z.optim_end = range.second;
  return z;
}

class CheckpointRoundTrip : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (std::string(GetParam()) == "collective" && world() > 2) TRIDENT_SKIP_NOT_APPLICABLE("collective I/O is tested at <= 2 ranks here");
  }
};

TEST_P(CheckpointRoundTrip, SameLayoutIsBitwise) {
  ScopedEnv io("TRIDENT_CHECKPOINT_IO", GetParam());
  const Reference& ref = reference();
  const std::string dir = shared_dir("trident-ckpt-rt");
  const std::string path = write(ref.h3, dir, 3);
  EXPECT_EQ(fs::path(path).filename().string(), "step_00000003.h5");

  CheckpointHeader header;
  const HostState r = load(path, ref.layout(), &header);
  EXPECT_TRUE(bitwise_equal(r.params, ref.h3.params));
  EXPECT_TRUE(bitwise_equal(r.m, ref.h3.m));
  EXPECT_TRUE(bitwise_equal(r.v, ref.h3.v));
  EXPECT_EQ(header.progress.step, 3);
  EXPECT_EQ(header.progress.optimizer_step, 3);
  EXPECT_EQ(header.progress.data_step, 3);
  EXPECT_EQ(header.progress.consumed_samples, 12);
  EXPECT_EQ(header.progress.model_seed, 7u);
  EXPECT_EQ(header.progress.loss, ref.losses[2]);
  EXPECT_EQ(header.layout.tp, world());
  EXPECT_EQ(header.layout.world_size, world());
  EXPECT_EQ(header.model.hidden, 64);
  if (rank() == 0) {
    EXPECT_EQ(header.deck, ref.cfg().resolved_toml);  // rank 0's deck (data paths differ by rank)
  }
  EXPECT_TRUE(header.has_optimizer);
  EXPECT_FALSE(header.has_master);
  EXPECT_EQ(latest_checkpoint(dir), path);

  // Into the serial layout as well (every rank holds the whole model; rank 0 owns it).
  const ParameterLayout serial(GptShapes::from(ref.cfg().model, 1), 0, 1);
  const HostState w = load_whole(path, serial);
  EXPECT_TRUE(bitwise_equal(w.params, ref.whole3.params));
  EXPECT_TRUE(bitwise_equal(w.m, ref.whole3.m));
  EXPECT_TRUE(bitwise_equal(w.v, ref.whole3.v));
}

// Layout-level resharding: ZeRO-style optimizer partitions (flat ranges that cut tensors mid-row,
// transposed Conv1D included) read and written, and tp 2 with replicas at 4 ranks.
TEST_P(CheckpointRoundTrip, ZeroPartitionsAndReplicatedTensorParallel) {
  ScopedEnv io("TRIDENT_CHECKPOINT_IO", GetParam());
  const Reference& ref = reference();
  const std::string dir = shared_dir("trident-ckpt-zero");
  const std::string a = write(ref.h3, dir, 3);

  // ZeRO over the world on the serial layout: rank r holds optimizer elements [b_r, e_r).
  const ParameterLayout serial(GptShapes::from(ref.cfg().model, 1), 0, 1);
  const int64_t total = serial.total();
  const auto [b, e] = odd_range(total);
  std::vector<float> params(total), m(e - b), v(e - b);
  RankShard z = range_shard(serial, params.data(), m.data(), v.data(), {b, e});
  z.params_owner = rank() == 0;
  load_checkpoint(a, ref.cfg(), z, MPI_COMM_WORLD);
  EXPECT_TRUE(bitwise_equal(params, ref.whole3.params));
  EXPECT_TRUE(bitwise_equal(m, slice(ref.whole3.m, b, e)));
  EXPECT_TRUE(bitwise_equal(v, slice(ref.whole3.v, b, e)));

  // Written from the partitions and read back into the tp = world layout: the original state.
  const std::string zdir = shared_dir("trident-ckpt-zero-w");
  Config cfg = ref.cfg();
  cfg.checkpoint.dir = zdir;
  const std::string zpath = write_checkpoint(zdir, cfg, z, progress_after_step(cfg, 3, NAN), MPI_COMM_WORLD);
  const HostState r = load(zpath, ref.layout());
  EXPECT_TRUE(bitwise_equal(r.params, ref.h3.params));
  EXPECT_TRUE(bitwise_equal(r.m, ref.h3.m));
  EXPECT_TRUE(bitwise_equal(r.v, ref.h3.v));

  // tp 2 x "dp" 2 at 4 ranks: ranks 0, 1 own; 2, 3 are replicas.
  if (world() == 4) {
    const GptShapes s2 = GptShapes::from(ref.cfg().model, 2);
    const ParameterLayout half(s2, rank() % 2, 2);
    HostState q = empty_state(half);
    q.shard.params_owner = q.shard.optim_owner = rank() < 2;
    load_checkpoint(a, ref.cfg(), q.shard, MPI_COMM_WORLD);
    const ParameterLayout whole_layout(s2, 0, 1);
    std::vector<float> want(half.total());
    shard_parameters(whole_layout, ref.whole3.params.data(), half, want.data());
    EXPECT_TRUE(bitwise_equal(q.params, want));
    shard_parameters(whole_layout, ref.whole3.v.data(), half, want.data());
    EXPECT_TRUE(bitwise_equal(q.v, want));
  }
}

// Parameters kept by ZeRO range (params_in_range: ZeRO-3's partitions, a bf16 run's masters) are written
// by each rank from its range alone, like the moments: the file holds the whole model, read back whole
// into the serial and the tp = world layouts, and by range again.
TEST_P(CheckpointRoundTrip, ParametersWrittenFromTheirZeroRanges) {
  ScopedEnv io("TRIDENT_CHECKPOINT_IO", GetParam());
  const Reference& ref = reference();
  const ParameterLayout serial(GptShapes::from(ref.cfg().model, 1), 0, 1);
  const int64_t total = serial.total();
  const auto [b, e] = odd_range(total);
  std::vector<float> params = slice(ref.whole3.params, b, e), m = slice(ref.whole3.m, b, e),
                     v = slice(ref.whole3.v, b, e);
  RankShard z = range_shard(serial, params.data(), m.data(), v.data(), {b, e});
  z.params_in_range = true;
  const std::string dir = shared_dir("trident-ckpt-ranged");
  Config cfg = ref.cfg();
  cfg.checkpoint.dir = dir;
  const std::string path = write_checkpoint(dir, cfg, z, progress_after_step(cfg, 3, NAN), MPI_COMM_WORLD);

  const HostState w = load_whole(path, serial);
  EXPECT_TRUE(bitwise_equal(w.params, ref.whole3.params));
  EXPECT_TRUE(bitwise_equal(w.v, ref.whole3.v));
  const HostState r = load(path, ref.layout());
  EXPECT_TRUE(bitwise_equal(r.params, ref.h3.params));
  EXPECT_TRUE(bitwise_equal(r.m, ref.h3.m));

  std::vector<float> back(size_t(e - b)), back_m(size_t(e - b)), back_v(size_t(e - b));
  z.params = back.data();
  z.exp_avg = back_m.data();
  z.exp_avg_sq = back_v.data();
  load_checkpoint(path, ref.cfg(), z, MPI_COMM_WORLD);
  EXPECT_TRUE(bitwise_equal(back, slice(ref.whole3.params, b, e)));

  // A rank with an empty range (here the last, whose range the one before takes) passes no buffers.
  if (world() > 1) {
    const bool last = rank() + 1 == world();
    RankShard y = z;
    y.optim_begin = last ? total : b;
    y.optim_end = total;
    if (rank() + 2 != world()) y.optim_end = e;
    const int64_t yb = y.optim_begin, ye = y.optim_stop();
    std::vector<float> yp = slice(ref.whole3.params, yb, ye), ym = slice(ref.whole3.m, yb, ye),
                       yv = slice(ref.whole3.v, yb, ye);
    y.params = last ? nullptr : yp.data();
    y.exp_avg = last ? nullptr : ym.data();
    y.exp_avg_sq = last ? nullptr : yv.data();
    const std::string ypath = write_checkpoint(dir, cfg, y, progress_after_step(cfg, 4, NAN), MPI_COMM_WORLD);
    const HostState u = load_whole(ypath, serial);
    EXPECT_TRUE(bitwise_equal(u.params, ref.whole3.params));
    EXPECT_TRUE(bitwise_equal(u.m, ref.whole3.m));
  }
}

INSTANTIATE_TEST_SUITE_P(Transfers, CheckpointRoundTrip, ::testing::Values("independent", "collective"));

TEST(CheckpointResume, InterruptedAndResumedEqualsUninterrupted) {
  const Reference& ref = reference();  // 5 uninterrupted steps
  const std::string dir = shared_dir("trident-ckpt-resume");
  write(ref.h3, dir, 3);  // the state of an interrupted run after step 3

  Session second(world());
  HostState r = empty_state(second.layout());
  const auto resumed = resume_checkpoint(with_checkpointing(second.cfg, dir), r.shard, MPI_COMM_WORLD);
  ASSERT_TRUE(resumed.has_value());
  EXPECT_TRUE(resumed->skipped.empty());
  ASSERT_EQ(resumed->header.progress.step, 3);
  upload(second, r);
  second.steps(resumed->header.progress.step + 1, 5);

  ASSERT_EQ(second.losses.size(), 2u);
  EXPECT_EQ(second.losses[0], ref.losses[3]) << "step 4 loss differs";
  EXPECT_EQ(second.losses[1], ref.losses[4]) << "step 5 loss differs";
  const Whole got = gather(second);
  EXPECT_TRUE(bitwise_equal(got.params, ref.whole5.params));
  EXPECT_TRUE(bitwise_equal(got.m, ref.whole5.m));
  EXPECT_TRUE(bitwise_equal(got.v, ref.whole5.v));
}

TEST(CheckpointReshard, TensorParallelToSerialContinuesWithTheSameLosses) {
  const Reference& ref = reference();
  const std::string dir = shared_dir("trident-ckpt-reshard");
  const std::string path = write(ref.h3, dir, 3);

  // Every rank resumes the whole model in a serial trainer: replicas, rank 0 owns (checksums).
  Session serial(1);
  HostState r = empty_state(serial.layout());
  r.shard.params_owner = r.shard.optim_owner = rank() == 0;
  load_checkpoint(path, serial.cfg, r.shard, MPI_COMM_WORLD);
  EXPECT_TRUE(bitwise_equal(r.params, ref.whole3.params));
  EXPECT_TRUE(bitwise_equal(r.m, ref.whole3.m));
  upload(serial, r);
  serial.steps(4, 5);
  for (int i = 0; i < 2; ++i)
    EXPECT_NEAR(serial.losses[i], ref.losses[3 + i], 1e-5 * std::abs(ref.losses[3 + i])) << "step " << 4 + i;

  // And back: the serial state after step 5 into the tp = world layout.
  HostState s5 = download(serial);
  s5.shard.params_owner = s5.shard.optim_owner = rank() == 0;
  const std::string back = write(s5, dir, 5);
  const HostState p = load(back, ref.layout());
  std::vector<float> want(ref.layout().total());
  shard_parameters(serial.layout(), s5.params.data(), ref.layout(), want.data());
  EXPECT_TRUE(bitwise_equal(p.params, want));
  shard_parameters(serial.layout(), s5.m.data(), ref.layout(), want.data());
  EXPECT_TRUE(bitwise_equal(p.m, want));
  shard_parameters(serial.layout(), s5.v.data(), ref.layout(), want.data());
  EXPECT_TRUE(bitwise_equal(p.v, want));
}

TEST(CheckpointWrite, OwnershipErrorsAreRefusedBeforeCommit) {
  HostState h = reference().h1;
  const std::string dir = shared_dir("trident-ckpt-own");
  h.shard.params_owner = false;  // nobody writes the parameters
  const std::string err = error_of([&] { write(h, dir, 1); });
  EXPECT_THAT(err, HasSubstr("dataset /model/transformer.wte.weight: the ranks wrote 0 elements"));
  EXPECT_TRUE(list_checkpoints(dir).empty());
  EXPECT_FALSE(fs::exists(dir + "/step_00000001.h5.tmp"));
  EXPECT_EQ(latest_checkpoint(dir), "");
}

// ---------------------------------------------------------------------------------------------
// Damage.

TEST(CheckpointDamage, FlippedBitIsDetectedNamingFileAndDataset) {
  const std::string dir = shared_dir("trident-ckpt-flip");
  const std::string path = write(reference().h1, dir, 1);
  const std::string dataset = "/optim/exp_avg/transformer.h.1.mlp.c_fc.weight";
  flip_bit(path, dataset, 1234);

  const std::string err = error_of([&] { load(path, reference().layout()); });
  EXPECT_THAT(err, HasSubstr(path));
  EXPECT_THAT(err, HasSubstr("checksum mismatch in dataset " + dataset));

  if (rank() == 0) {
    int failed = 0;
    for (const auto& v : verify_checkpoint(path)) {
      if (!v.ok) {
        ++failed;
        EXPECT_EQ(v.dataset, dataset);
      }
    }
    EXPECT_EQ(failed, 1);
  }
  barrier();
}

TEST(CheckpointDamage, TruncatedFileIsDetected) {
  const std::string dir = shared_dir("trident-ckpt-trunc");
  const std::string path = write(reference().h1, dir, 1);
  if (rank() == 0) fs::resize_file(path, fs::file_size(path) * 6 / 10);
  barrier();
  const std::string err = error_of([&] { load(path, reference().layout()); });
  EXPECT_THAT(err, HasSubstr(path));
  EXPECT_THAT(err, HasSubstr("truncated"));
}

TEST(CheckpointDamage, MissingFileAndMissingDatasetAreNamed) {
  const std::string dir = shared_dir("trident-ckpt-missing");
  const std::string nofile = dir + "/step_00000042.h5";
  EXPECT_THAT(error_of([&] { load(nofile, reference().layout()); }), HasSubstr(nofile + ": no such checkpoint file"));

  const std::string path = write(reference().h1, dir, 1);
  const std::string dataset = "/optim/exp_avg_sq/transformer.h.0.attn.c_proj.weight";
  if (rank() == 0) {
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    EXPECT_GE(H5Ldelete(f, dataset.c_str(), H5P_DEFAULT), 0);
    H5Fclose(f);
    ckpt::reseal_checkpoint(path);  // a file written without the dataset
  }
  barrier();
  const std::string err = error_of([&] { load(path, reference().layout()); });
  EXPECT_THAT(err, HasSubstr(path));
  EXPECT_THAT(err, HasSubstr("dataset " + dataset + " is missing"));
}

TEST(CheckpointDamage, WrongShapeIsNamed) {
  // A checkpoint of a model with hidden 32 (zero weights; only shapes matter) into hidden 64.
  const Config narrow = small_deck(kVocab, deck_overrides(world(), {"model.hidden=32"}));
  const ParameterLayout layout(GptShapes::from(narrow.model, world()), rank(), world());
  HostState h = empty_state(layout);
  const std::string dir = shared_dir("trident-ckpt-shape");
  const std::string path = write(h, dir, 1, {}, &narrow);

  const std::string err = error_of([&] { load(path, reference().layout()); });
  EXPECT_THAT(err, HasSubstr(path + ": dataset /model/transformer.wte.weight has shape [1009, 32], this model needs "
                                    "[1009, 64]"));
}

TEST(CheckpointDamage, FutureFormatVersionIsRefused) {
  const std::string dir = shared_dir("trident-ckpt-future");
  const std::string path = write(reference().h1, dir, 1);
  set_root_attribute(path, "format_version", kCheckpointFormatVersion + 1);
  const std::string err = error_of([&] { load(path, reference().layout()); });
  EXPECT_THAT(err, HasSubstr(fmt::format("{}: format version {} is newer than this trident reads (up to {})", path,
                                         kCheckpointFormatVersion + 1, kCheckpointFormatVersion)));
}

// ---------------------------------------------------------------------------------------------
// Atomicity, resume, keep.

TEST(CheckpointAtomicity, CrashBeforeRenameLeavesLatestValid) {
  const Reference& ref = reference();
  const std::string dir = shared_dir("trident-ckpt-crash");
  const std::string first = write(ref.h1, dir, 1);
  WriteOptions crash;
  crash.crash_at = CrashPoint::BeforeRename;
  EXPECT_THROW(write(ref.h2, dir, 2, crash), InjectedCrash);
  EXPECT_TRUE(fs::exists(dir + "/step_00000002.h5.tmp"));
  EXPECT_FALSE(fs::exists(dir + "/step_00000002.h5"));
  EXPECT_EQ(latest_checkpoint(dir), first);
  EXPECT_EQ(list_checkpoints(dir), std::vector<std::string>{first});

  // Resume picks the complete one; its state is step 1's.
  HostState r = empty_state(ref.layout());
  const auto rp = resume_checkpoint(with_checkpointing(ref.cfg(), dir), r.shard, MPI_COMM_WORLD);
  ASSERT_TRUE(rp.has_value());
  EXPECT_EQ(rp->header.path, first);
  EXPECT_TRUE(bitwise_equal(r.params, ref.h1.params));
  EXPECT_TRUE(bitwise_equal(r.m, ref.h1.m));

  // The next write cleans the leftover.
  write(ref.h2, dir, 2);
  EXPECT_FALSE(fs::exists(dir + "/step_00000002.h5.tmp"));
  EXPECT_EQ(latest_checkpoint(dir), dir + "/step_00000002.h5");
}

TEST(CheckpointAtomicity, CrashBeforeLatestResumesFromTheCompleteNewerFile) {
  const Reference& ref = reference();
  const std::string dir = shared_dir("trident-ckpt-crash2");
  const std::string first = write(ref.h1, dir, 1);
  WriteOptions crash;
  crash.crash_at = CrashPoint::BeforeLatest;
  EXPECT_THROW(write(ref.h2, dir, 2, crash), InjectedCrash);
  EXPECT_EQ(latest_checkpoint(dir), first);  // still names a complete checkpoint
  HostState r = empty_state(ref.layout());
  const auto rp = resume_checkpoint(with_checkpointing(ref.cfg(), dir), r.shard, MPI_COMM_WORLD);
  ASSERT_TRUE(rp.has_value());
  EXPECT_EQ(rp->header.progress.step, 2);
  EXPECT_TRUE(bitwise_equal(r.params, ref.h2.params));
}

TEST(CheckpointResume, AutoFallsBackToThePreviousValidOneAndSaysSo) {
  const Reference& ref = reference();
  const std::string dir = shared_dir("trident-ckpt-fallback");
  const std::string first = write(ref.h1, dir, 1);
  const std::string second = write(ref.h2, dir, 2);
  flip_bit(second, "/model/transformer.ln_f.bias", 3);

  HostState r = empty_state(ref.layout());
  const auto rp = resume_checkpoint(with_checkpointing(ref.cfg(), dir), r.shard, MPI_COMM_WORLD);
  ASSERT_TRUE(rp.has_value());
  EXPECT_EQ(rp->header.path, first);
  ASSERT_EQ(rp->skipped.size(), 1u);
  EXPECT_THAT(rp->skipped[0], HasSubstr(second));
  EXPECT_THAT(rp->skipped[0], HasSubstr("/model/transformer.ln_f.bias"));
  EXPECT_TRUE(bitwise_equal(r.params, ref.h1.params));

  // The damaged one named explicitly is an error; "never" starts fresh.
  EXPECT_THAT(
      error_of([&] { resume_checkpoint(with_checkpointing(ref.cfg(), dir, second), r.shard, MPI_COMM_WORLD); }),
      HasSubstr("/model/transformer.ln_f.bias"));
  EXPECT_FALSE(resume_checkpoint(with_checkpointing(ref.cfg(), dir, "never"), r.shard, MPI_COMM_WORLD).has_value());

  // The older one from a future format too: nothing valid left is an error, not a silent fresh start.
  set_root_attribute(first, "format_version", 99);
  const std::string err =
      error_of([&] { resume_checkpoint(with_checkpointing(ref.cfg(), dir), r.shard, MPI_COMM_WORLD); });
  EXPECT_THAT(err, HasSubstr("none of its 2 checkpoint(s) is valid"));
  EXPECT_THAT(err, HasSubstr("format version 99"));

  // An empty directory (or none yet): start fresh.
  const std::string empty = shared_dir("trident-ckpt-empty");
  EXPECT_FALSE(resume_checkpoint(with_checkpointing(ref.cfg(), empty), r.shard, MPI_COMM_WORLD).has_value());
  EXPECT_FALSE(
      resume_checkpoint(with_checkpointing(ref.cfg(), empty + "/not-yet"), r.shard, MPI_COMM_WORLD).has_value());
  if (rank() == 0) {
    EXPECT_EQ(find_resume_checkpoint(with_checkpointing(ref.cfg(), empty).checkpoint), "");
    // By structure alone (no checksums): the bit-flipped newest one is still the candidate.
    std::vector<std::string> skipped;
    EXPECT_EQ(find_resume_checkpoint(with_checkpointing(ref.cfg(), dir).checkpoint, &skipped), second);
    EXPECT_TRUE(skipped.empty());
    EXPECT_THROW(find_resume_checkpoint(with_checkpointing(ref.cfg(), dir, first).checkpoint), CheckpointError);
  }
  barrier();
}

TEST(CheckpointKeep, KeepsTheNewestN) {
  const Reference& ref = reference();
  const std::string dir = shared_dir("trident-ckpt-keep");
  Config cfg = ref.cfg();  // keep = 2 (the default)
  for (int64_t step = 1; step <= 4; ++step) write(ref.h1, dir, step, {}, &cfg);
  EXPECT_EQ(list_checkpoints(dir), (std::vector<std::string>{dir + "/step_00000004.h5", dir + "/step_00000003.h5"}));
  EXPECT_EQ(latest_checkpoint(dir), dir + "/step_00000004.h5");

  cfg.checkpoint.keep = 0;  // all
  const std::string dir0 = shared_dir("trident-ckpt-keep0");
  for (int64_t step = 1; step <= 3; ++step) write(ref.h1, dir0, step, {}, &cfg);
  EXPECT_EQ(list_checkpoints(dir0).size(), 3u);
}

TEST(CheckpointSchedule, StepsEndAndRequestsAreCollective) {
  CheckpointConfig c;
  c.dir = "/unused";
  c.every_steps = 3;
  CheckpointSchedule schedule(c, 10, MPI_COMM_WORLD);
  std::vector<int64_t> written;
  for (int64_t step = 1; step <= 10; ++step) {
    if (step == 5 && rank() == world() - 1) request_checkpoint();  // one rank asks
    const auto d = schedule.should_write(step);
    if (d.write) written.push_back(step);
    if (step == 5) {
      EXPECT_EQ(d.reason, "requested");
    }
    if (step == 10) {
      EXPECT_EQ(d.reason, "end of training");
    }
  }
  EXPECT_EQ(written, (std::vector<int64_t>{3, 5, 6, 9, 10}));

  CheckpointConfig t;
  t.dir = "/unused";
  t.every_minutes = 1e-9;  // due at once
  CheckpointSchedule timed(t, 100, MPI_COMM_WORLD);
  usleep(1000);
  EXPECT_EQ(timed.should_write(1).reason, "every 1e-09 minutes");
  CheckpointSchedule off(CheckpointConfig{}, 100, MPI_COMM_WORLD);
  EXPECT_FALSE(off.should_write(100).write);
}

// ---------------------------------------------------------------------------------------------
// Interchange: h5py, export.

TEST(CheckpointInterchange, H5pyFindsTheDocumentedNamesAndShapes) {
  const Reference& ref = reference();
  const std::string dir = shared_dir("trident-ckpt-h5py");
  const std::string path = write(ref.h2, dir, 2);
  const std::string missing = test::missing_python_modules({"h5py", "numpy"});  // collective
  if (!missing.empty()) FAIL() << missing;
  if (rank() == 0) {
    std::string out;
    // Expected: Hugging Face GPT-2 names and shapes for this model.
    nlohmann::json expected;
    const GptShapes shapes = GptShapes::from(ref.cfg().model, 1);
    const ParameterLayout global(shapes, 0, 1);
    for (const auto& t : global.tensors()) expected[t.name] = hf_shape(t, shapes);
    write_file(dir + "/expected.json", expected.dump());
    const int rc =
        run_command(fmt::format("/usr/bin/python3 {} {} {}", TRIDENT_H5PY_CHECK, path, dir + "/expected.json"), &out);
    EXPECT_EQ(rc, 0) << out;
    EXPECT_THAT(out, HasSubstr(fmt::format("OK {} datasets", 3 * global.tensors().size())));
  }
  barrier();
}

TEST(CheckpointInterchange, ExportLoadsBackThroughInitFromWithTheSameLoss) {
  const Reference& ref = reference();
  const std::string dir = shared_dir("trident-ckpt-export");
  write(ref.h3, dir, 3);
  const std::string out = dir + "/hf";
  if (rank() == 0) {
    const ExportResult exported = export_checkpoint(dir, out);
    EXPECT_EQ(exported.checkpoint, dir + "/step_00000003.h5");  // a directory means its latest
    // The test deck's llm.c ids of a 1009-token vocabulary come from no known tokenizer: no files.
    EXPECT_EQ(exported.tokenizer, Tokenizer::None);
    EXPECT_EQ(exported.files, (std::vector<std::string>{"model.safetensors", "config.json"}));
    EXPECT_FALSE(fs::exists(out + "/vocab.json"));
    SafetensorsReader st(out + "/model.safetensors");
    const GptShapes shapes = GptShapes::from(ref.cfg().model, 1);
    const ParameterLayout global(shapes, 0, 1);
    EXPECT_EQ(st.names().size(), global.tensors().size());
    for (const auto& t : global.tensors()) EXPECT_EQ(st.shape(t.name), hf_shape(t, shapes)) << t.name;
    EXPECT_EQ(st.shape("transformer.wte.weight"), (std::vector<int64_t>{kVocab, 64}));
    EXPECT_EQ(st.shape("transformer.h.0.attn.c_attn.weight"), (std::vector<int64_t>{64, 192}));
    EXPECT_EQ(st.shape("transformer.h.1.mlp.c_proj.weight"), (std::vector<int64_t>{256, 64}));
    EXPECT_FALSE(st.has("lm_head.weight"));  // tied
    EXPECT_EQ(st.metadata("format"), "pt");
    std::ifstream f(out + "/config.json");
    const auto config = nlohmann::json::parse(f);
    EXPECT_EQ(config["architectures"][0], "GPT2LMHeadModel");
    EXPECT_EQ(config["model_type"], "gpt2");
    EXPECT_EQ(config["vocab_size"], kVocab);
    EXPECT_EQ(config["n_positions"], 16);
    EXPECT_EQ(config["n_embd"], 64);
    EXPECT_EQ(config["n_layer"], 2);
    EXPECT_EQ(config["n_head"], 4);
    EXPECT_TRUE(config["n_inner"].is_null());
    EXPECT_EQ(config["activation_function"], "gelu_new");
    EXPECT_EQ(config["layer_norm_epsilon"], 1e-5);
    EXPECT_EQ(config["initializer_range"], 0.02);
    EXPECT_EQ(config["tie_word_embeddings"], true);
    EXPECT_EQ(config["torch_dtype"], "float32");

    // bf16: every tensor BF16, each value the fp32 one rounded to nearest even (checked by numpy alone),
    // half the bytes, config.json's torch_dtype bfloat16.
    export_checkpoint(dir, out + "-bf16", /*bf16=*/true);
    std::string check;
    const int rc = run_command(fmt::format("/usr/bin/python3 {} {} {}", TRIDENT_BF16_EXPORT_CHECK,
                                           out + "/model.safetensors", out + "-bf16/model.safetensors"),
                               &check);
    EXPECT_EQ(rc, 0) << check;
    EXPECT_THAT(check, HasSubstr(fmt::format("OK {} tensors", global.tensors().size())));
    const auto f32_bytes = fs::file_size(out + "/model.safetensors"), bf16_bytes = fs::file_size(out + "-bf16/model.safetensors");
    EXPECT_NEAR(double(bf16_bytes) / double(f32_bytes), 0.5, 0.01);
    std::ifstream bf16_config_file(out + "-bf16/config.json");
    EXPECT_EQ(nlohmann::json::parse(bf16_config_file)["torch_dtype"], "bfloat16");
  }
  barrier();

  // The exported weights as model.init_from, same layout: step 4's loss (computed before its
  // update) is the uninterrupted run's, bit for bit. The bf16 export loads too (the reader widens each
  // value exactly), its loss within bf16's rounding of the weights.
  Session loaded(world(), {"model.init_from=" + out + "/model.safetensors"});
  EXPECT_EQ(loaded.trainer->train_step(4).loss, ref.losses[3]);
  Session loaded_bf16(world(), {"model.init_from=" + out + "-bf16/model.safetensors"});
  const double bf16_loss = loaded_bf16.trainer->train_step(4).loss;
  EXPECT_NE(bf16_loss, ref.losses[3]);
  EXPECT_NEAR(bf16_loss, ref.losses[3], 1e-2 * ref.losses[3]);
}

// ---------------------------------------------------------------------------------------------
// The command line (one rank: the tools are serial; run as fresh singleton MPI processes).

struct Cli {
  int rc;
  std::string out;
};
Cli trident_cli(const std::string& args) {
  Cli c;
  c.rc = run_command(fmt::format("env -u PMI_FD -u PMI_RANK -u PMI_SIZE -u PMI_PORT -u PMI_ID -u MPI_LOCALNRANKS "
                                 "-u MPI_LOCALRANKID OPENBLAS_NUM_THREADS=1 timeout 60 {} ckpt {}",
                                 trident_binary(), args),
                     &c.out);
  return c;
}

TEST(CheckpointCli, ListInspectVerifyExport) {
  if (world() != 1) TRIDENT_SKIP_NOT_APPLICABLE("the CLI is checked at 1 rank");
  const Reference& ref = reference();
  const std::string dir = shared_dir("trident-ckpt-cli");
  write(ref.h1, dir, 1);
  const std::string path = write(ref.h2, dir, 2);
  test::write_file(dir + "/step_00000003.h5.tmp", "partial");

  const int datasets = 3 * 28 + 1;  // 28 tensors in three groups, and the deck
  Cli list = trident_cli("list " + dir);
  EXPECT_EQ(list.rc, 0) << list.out;
  EXPECT_THAT(list.out, HasSubstr("2 checkpoint(s) in " + dir + " (latest: step_00000002.h5)"));
  EXPECT_THAT(list.out, HasSubstr("step_00000001.h5"));
  EXPECT_THAT(list.out, HasSubstr("<- latest"));
  EXPECT_THAT(list.out, HasSubstr("step_00000003.h5.tmp     incomplete (an interrupted write"));

  Cli inspect = trident_cli("inspect " + dir + " --deck");
  EXPECT_EQ(inspect.rc, 0) << inspect.out;
  EXPECT_THAT(inspect.out, HasSubstr("step            2 (optimizer step 2, next data step 2, 8 samples consumed)"));
  EXPECT_THAT(inspect.out, HasSubstr("/model/transformer.h.0.attn.c_attn.weight"));
  EXPECT_THAT(inspect.out, HasSubstr("[64, 192]"));
  EXPECT_THAT(inspect.out, HasSubstr("[model]"));

  Cli verify = trident_cli("verify " + path);
  EXPECT_EQ(verify.rc, 0) << verify.out;
  EXPECT_THAT(verify.out, HasSubstr(fmt::format("all {} checksums verified", datasets)));

  Cli exported = trident_cli("export " + dir + " --out " + dir + "/hf");
  EXPECT_EQ(exported.rc, 0) << exported.out;
  EXPECT_TRUE(fs::exists(dir + "/hf/model.safetensors"));
  EXPECT_TRUE(fs::exists(dir + "/hf/config.json"));
  Cli exported_bf16 = trident_cli("export " + dir + " --out " + dir + "/hf-bf16 --dtype bf16");
  EXPECT_EQ(exported_bf16.rc, 0) << exported_bf16.out;
  EXPECT_THAT(exported_bf16.out, HasSubstr("(bf16)"));
  EXPECT_EQ(SafetensorsReader(dir + "/hf-bf16/model.safetensors").dtype("transformer.wte.weight"), "BF16");
  Cli fp16 = trident_cli("export " + dir + " --out " + dir + "/hf-fp16 --dtype fp16");
  EXPECT_NE(fp16.rc, 0) << fp16.out;
  EXPECT_THAT(fp16.out, HasSubstr("fp16"));
  EXPECT_FALSE(fs::exists(dir + "/hf-fp16"));

  flip_bit(path, "/model/transformer.h.1.attn.c_attn.bias", 5);
  Cli bad = trident_cli("verify " + dir);
  EXPECT_EQ(bad.rc, 2) << bad.out;
  EXPECT_THAT(bad.out, HasSubstr("FAILED   /model/transformer.h.1.attn.c_attn.bias"));
  EXPECT_THAT(bad.out, HasSubstr(fmt::format("{}: 1 of {} datasets failed verification: "
                                             "/model/transformer.h.1.attn.c_attn.bias",
                                             path, datasets)));
  Cli refused = trident_cli("export " + path + " --out " + dir + "/hf2");
  EXPECT_EQ(refused.rc, 2) << refused.out;
  EXPECT_THAT(refused.out, HasSubstr("/model/transformer.h.1.attn.c_attn.bias: checksum mismatch"));
  EXPECT_FALSE(fs::exists(dir + "/hf2/model.safetensors"));

  Cli missing = trident_cli("inspect " + dir + "/nothing.h5");
  EXPECT_EQ(missing.rc, 2) << missing.out;
  EXPECT_THAT(missing.out, HasSubstr(dir + "/nothing.h5: no such checkpoint file"));
}

}  // namespace
}  // namespace trident::test
