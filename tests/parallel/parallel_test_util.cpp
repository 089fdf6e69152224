#include "parallel/parallel_test_util.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>

#include "common/test_support.hpp"
#include "backend.hpp"
#include "comm/staging.hpp"
#include "comm/watchdog.hpp"
#include "kernels.hpp"

namespace trident::test {
namespace {

constexpr double kDeckLr = 1e-3;

// An llm.c shard (header of 256 int32: magic, version, count; then uint16 tokens) of random tokens.
std::string write_token_shard(int64_t vocab, int64_t tokens) {
  static std::map<int64_t, std::string> written;
  if (auto it = written.find(vocab); it != written.end()) return it->second;
  const std::string dir = make_temp_dir(fmt::format("trident-par-r{}", world_rank()));
  const std::string path = dir + "/tokens.bin";
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520;
  header[1] = 1;
  header[2] = int32_t(tokens);
  std::mt19937_64 gen(42);
  std::vector<uint16_t> ids(tokens);
  for (auto& t : ids) t = uint16_t(gen() % uint64_t(vocab));
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(header.data()), header.size() * 4);
  f.write(reinterpret_cast<const char*>(ids.data()), ids.size() * 2);
  written[vocab] = path;
  return path;
}

// By name, from this TP rank's slice in host memory.
TensorsByName by_name(GptModel& model, const std::vector<float>& host) {
  Kernels& k = test_kernels();
  float* buffer = k.alloc(int64_t(host.size()));
  k.copy_to_device(buffer, host.data(), int64_t(host.size()));
  const auto whole = model.gather_global(buffer);
  k.free(buffer);
  TensorsByName out;
  for (const auto& t : model.global_layout().tensors())
    out[t.name] = hf_tensor(model.global_layout(), whole.data(), t);
  return out;
}

std::unique_ptr<ComputeBackend>& backend_slot() {
  static std::unique_ptr<ComputeBackend> b;
  return b;
}

std::string test_transport() {
  const char* t = std::getenv("TRIDENT_TEST_TRANSPORT");
  return t ? t : "";
}
bool over_nccl() { return test_transport() == "gpu-nccl"; }

// Skips every test of the process when the GPU suites find no GPU (or, over NCCL, fewer GPUs than
// ranks); releases the kernels before the test main finalises Kokkos and MPI. On the GPU a watchdog
// runs, as in `trident train`: a transfer or collective that never completes (an NCCL call order that
// deadlocks) ends the job naming it, within kGpuCollectiveLimitS, instead of running into ctest's limit.
class BackendEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    if (on_gpu() && !cuda_device_available())
      GTEST_SKIP() << "TRIDENT_TEST_TRANSPORT=" << test_transport()
                   << " but no CUDA device (or a build without CUDA): the GPU runs of the parallel suites need one";
    if (over_nccl() && cuda_device_count() < world_size())
      GTEST_SKIP() << world_size() << " ranks but " << cuda_device_count()
                   << " GPU(s) here: the NCCL runs need one GPU per rank (the gpu-staged runs cover one GPU)";
    if (on_gpu()) monitor_ = std::make_unique<watchdog::Monitor>(kGpuCollectiveLimitS, 0.0);
  }
  void TearDown() override {
    backend_slot().reset();
    monitor_.reset();
  }

 private:
  // Longer than any legitimate wait of a rank for another's step on a busy 2-core machine (gpu-sim).
  static constexpr double kGpuCollectiveLimitS = 300;
  std::unique_ptr<watchdog::Monitor> monitor_;
};
[[maybe_unused]] const ::testing::Environment* const kBackendEnvironment =
    ::testing::AddGlobalTestEnvironment(new BackendEnvironment);

}  // namespace

bool on_gpu() { return test_transport().rfind("gpu-", 0) == 0; }

Kernels& test_kernels() {
  auto& b = backend_slot();
  // gpu-staged: every rank on the GPUs it sees, shared; gpu-nccl: one GPU per rank.
  if (!b) b = start_backend(on_gpu() ? Backend::Cuda : Backend::Cpu, world_rank(), world_size(), !over_nccl());
  return b->kernels();
}

// Copies for the staged transport on the cpu backend, where "device" memory is host memory: the staging
// logic (copies in and out, requests finished at their wait or test) runs under every parallel scheme.
int64_t g_staged_copies = 0;  // copies to the host so far: proof that the staging ran

class HostCopies final : public DeviceCopies {
 public:
  void* alloc_host(int64_t bytes) override { return std::malloc(size_t(bytes)); }
  void free_host(void* p) override { std::free(p); }
  void to_host(void* host, const void* device, int64_t bytes) override {
    ++g_staged_copies;
    std::memcpy(host, device, size_t(bytes));
  }
  void to_device(void* device, const void* host, int64_t bytes) override { std::memcpy(device, host, size_t(bytes)); }
};

bool staged_on_host() { return test_transport() == "host-staged"; }

void connect(ParallelMesh& mesh, const Config& cfg) {
  if (mesh.tensor_transport() != TensorTransport::Host) return;
  if (!staged_on_host()) return mesh.connect_tensors(cfg.runtime.comm, test_kernels());
  for (Group* g : {&mesh.tp(), &mesh.pp(), &mesh.dp(), mesh.embedding()})
    if (g) g->use_staging(std::make_unique<HostCopies>());
}

Config small_deck(int64_t vocab, const std::vector<std::string>& overrides) {
  const std::string deck = fmt::format(R"(
[model]
vocab_size = {}
seq_len = 16
layers = 2
hidden = 64
heads = 4
seed = 7
tie_embeddings = true
[train]
steps = 5
micro_batch = 2
global_batch = 4
lr = {}
warmup_steps = 2
grad_clip = 1.0
[data]
format = "llmc"
path = "{}"
val_path = "{}"
[runtime]
mpi_wait = "poll"
)",
                                       vocab, kDeckLr, write_token_shard(vocab, 4096), write_token_shard(vocab, 4096));
  std::vector<std::string> all = overrides;
  if (on_gpu()) all.insert(all.end(), {"runtime.backend=cuda", over_nccl() ? "runtime.comm=nccl" : "runtime.comm=mpi"});
  return parse_deck(deck, "test.toml", all, DeckOptions{});
}

// Chunk c's gradients as the optimizer sees them, whole. Under ZeRO each DP rank holds the reduced
// gradients of its own range only (zero 2 has nothing else): the ranges are put together over DP.
std::vector<float> reduced_gradients(Trainer& trainer, ParallelMesh* mesh, size_t c) {
  GptModel& chunk = *trainer.chunks()[c];
  const AdamW& opt = *trainer.optimizers()[c];
  std::vector<float> g(size_t(chunk.layout().total()), 0.f);
  test_kernels().copy_to_host(g.data() + opt.begin(), trainer.range_gradients(c), opt.end() - opt.begin());
  if (!mesh || mesh->dp().size() == 1 || opt.end() - opt.begin() == chunk.layout().total()) return g;
  mesh->dp().all_reduce_host(g.data(), int64_t(g.size()));
  return g;
}

RunResult run_steps(const Config& cfg, ParallelMesh* mesh, int64_t steps) {
  if (mesh) connect(*mesh, cfg);
  const int64_t copies_before = g_staged_copies;
  Trainer trainer(cfg, test_kernels(), mesh);
  RunResult r;
  for (int64_t s = 1; s <= steps; ++s) {
    const StepMetrics m = trainer.train_step(s);
    r.losses.push_back(m.loss);
    r.grad_norms.push_back(m.grad_norm);
    if (s > kGradientSteps) continue;
    TensorsByName& grads = r.grads.emplace_back();
    for (size_t c = 0; c < trainer.chunks().size(); ++c)
      grads.merge(by_name(*trainer.chunks()[c], reduced_gradients(trainer, mesh, c)));
  }
  for (size_t c = 0; c < trainer.chunks().size(); ++c)
    r.final_params.merge(by_name(*trainer.chunks()[c], trainer.whole_parameters(c)));
  if (staged_on_host() && mesh && mesh->world_size() > 1) {
    EXPECT_GT(g_staged_copies, copies_before) << "TRIDENT_TEST_TRANSPORT=host-staged but nothing was staged";
  }
  r.finishing_phases = trainer.gradient_finisher().last_phases();
  r.val_loss = trainer.validation_loss();
  return r;
}

int expect_layouts_match_serial(const std::vector<NamedLayout>& layouts, const std::vector<std::string>& base,
                                const Tolerance& tol) {
  int run = 0;
  for (const auto& layout : layouts) {
    if (layout.ranks != world_size()) continue;
    SCOPED_TRACE(layout.name);
    auto all = base, model_only = base;
    all.insert(all.end(), layout.sets.begin(), layout.sets.end());
    for (const auto& s : layout.sets)
      if (s.rfind("mesh.", 0) != 0) model_only.push_back(s);
    const Config cfg = small_deck(1009, all);
    const Config serial_deck = small_deck(1009, model_only);
    const RunResult& serial = serial_run(serial_deck, 5);
    ParallelMesh mesh(MPI_COMM_WORLD, cfg.mesh, cfg.runtime.mpi_wait);
    connect(mesh, cfg);
    expect_matches_serial(run_steps(cfg, &mesh, 5), serial, tol);
    ++run;
  }
  return run;
}

const RunResult& serial_run(const Config& cfg, int64_t steps) {
  static std::map<std::pair<std::string, int64_t>, RunResult> runs;
  const auto key = std::make_pair(cfg.resolved_toml, steps);
  auto it = runs.find(key);
  if (it == runs.end()) it = runs.emplace(key, run_steps(cfg, nullptr, steps)).first;
  return it->second;
}

double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    ref += double(b[i]) * b[i];
  }
  if (a.size() != b.size()) return INFINITY;
  return ref == 0 ? std::sqrt(diff) : std::sqrt(diff / ref);
}

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Largest deviations seen by one comparison: loss (relative), gradient of step 1 and of later steps
// (relative L2), parameter (absolute).
struct Worst {
  double values[4] = {0, 0, 0, 0};
  std::string parameter_name;  // of this rank's largest parameter deviation
  void see(int i, double v) { values[i] = std::max(values[i], v); }
};

void expect_losses(const RunResult& par, const RunResult& serial, const Tolerance& tol, Worst& worst) {
  EXPECT_EQ(par.losses.size(), serial.losses.size());
  for (size_t s = 0; s < std::min(par.losses.size(), serial.losses.size()); ++s) {
    const double loss = std::abs(par.losses[s] - serial.losses[s]) / std::abs(serial.losses[s]);
    const double norm = std::abs(par.grad_norms[s] - serial.grad_norms[s]) / serial.grad_norms[s];
    EXPECT_LE(loss, tol.loss) << "loss of step " << s + 1;
    EXPECT_LE(norm, tol.loss) << "gradient norm of step " << s + 1;
    worst.see(0, std::max(loss, norm));
  }
  const double val = std::abs(par.val_loss - serial.val_loss) / serial.val_loss;
  EXPECT_LE(val, tol.loss) << "validation loss after the last step";
  worst.see(0, val);
}

// Every tensor of `serial` must be compared on some rank: a run that lost a tensor fails.
void expect_gradients(const RunResult& par, const RunResult& serial, const Tolerance& tol, Worst& worst) {
  EXPECT_EQ(par.grads.size(), serial.grads.size());
  for (size_t s = 0; s < std::min(par.grads.size(), serial.grads.size()); ++s) {
    std::vector<int> held;
    for (const auto& [name, ref] : serial.grads[s]) {
      const auto it = par.grads[s].find(name);
      held.push_back(it != par.grads[s].end());
      if (it == par.grads[s].end()) continue;
      const double d = relative_l2(it->second, ref);
      EXPECT_LE(d, s == 0 ? tol.gradient : tol.later_gradient) << name << " (gradient of step " << s + 1 << ")";
      worst.see(s == 0 ? 1 : 2, d);
    }
    MPI_Allreduce(MPI_IN_PLACE, held.data(), int(held.size()), MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    EXPECT_EQ(std::count(held.begin(), held.end(), 0), 0) << "gradients of step " << s + 1 << " no rank compared";
    for (const auto& [name, g] : par.grads[s])
      EXPECT_TRUE(serial.grads[s].count(name)) << name << " is not in the serial model";
  }
}

void expect_parameters(const RunResult& par, const RunResult& serial, const Tolerance& tol, Worst& worst) {
  EXPECT_FALSE(par.final_params.empty());
  // The key third of the QKV bias shifts every attention score of a row equally, which softmax
  // ignores: its true gradient is exactly 0 and both runs see only rounding noise, which AdamW
  // normalises into steps of up to lr. Query and value thirds are compared as usual; the key third
  // may drift by at most steps * lr.
  const float key_drift = float(double(serial.losses.size()) * kDeckLr);
  for (const auto& [name, p] : par.final_params) {
    const auto it = serial.final_params.find(name);
    EXPECT_TRUE(it != serial.final_params.end()) << name << " is not a parameter of the serial model";
    if (it == serial.final_params.end()) continue;
    EXPECT_EQ(p.size(), it->second.size()) << name;
    if (p.size() != it->second.size()) continue;
    const auto& ref = it->second;
    const bool qkv_bias = ends_with(name, "attn.c_attn.bias");
    float worst_here = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      const float d = std::abs(p[i] - ref[i]);
      const bool key = qkv_bias && i >= p.size() / 3 && i < 2 * p.size() / 3;
      if (key) {
        EXPECT_LE(d, key_drift) << name << " element " << i;
      } else {
        worst_here = std::max(worst_here, d);
      }
    }
    EXPECT_LE(worst_here, tol.parameter) << name << " (parameters after step " << serial.losses.size() << ")";
    if (worst_here > worst.values[3]) worst.parameter_name = name;
    worst.see(3, worst_here);
  }
}

}  // namespace

void expect_matches_serial(const RunResult& par, const RunResult& serial, const Tolerance& tol) {
  Worst worst;
  expect_losses(par, serial, tol, worst);
  expect_gradients(par, serial, tol, worst);
  expect_parameters(par, serial, tol, worst);
  if (!std::getenv("TRIDENT_TEST_REPORT_ERRORS")) return;
  MPI_Allreduce(MPI_IN_PLACE, worst.values, 4, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (world_rank() == 0)
    std::printf("[deviation] %s: loss %.3g, gradient step 1 %.3g, later %.3g, parameter %.3g (rank 0: %s)\n",
                ::testing::UnitTest::GetInstance()->current_test_info()->name(), worst.values[0], worst.values[1],
                worst.values[2], worst.values[3], worst.parameter_name.c_str());
}

}  // namespace trident::test
