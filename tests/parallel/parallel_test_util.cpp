#include "parallel/parallel_test_util.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

#include "common/test_support.hpp"
#include "kernels.hpp"

namespace trident::test {
namespace {

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

std::map<std::string, std::vector<float>> by_name(GptModel& model, const float* buffer) {
  const auto whole = model.gather_global(buffer);
  std::map<std::string, std::vector<float>> out;
  for (const auto& t : model.global_layout().tensors())
    out[t.name] = hf_tensor(model.global_layout(), whole.data(), t);
  return out;
}

}  // namespace

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
lr = 1e-3
warmup_steps = 2
grad_clip = 1.0
[data]
format = "llmc"
path = "{}"
[runtime]
mpi_wait = "poll"
)",
                                       vocab, write_token_shard(vocab, 4096));
  return parse_deck(deck, "test.toml", overrides, DeckOptions{});
}

// Chunk c's gradients as the optimizer sees them, whole. Under ZeRO each DP rank holds the reduced
// gradients of its own range only (zero 2 has nothing else): the ranges are put together over DP.
std::vector<float> reduced_gradients(Trainer& trainer, ParallelMesh* mesh, size_t c) {
  GptModel& chunk = *trainer.chunks()[c];
  const AdamW& opt = *trainer.optimizers()[c];
  std::vector<float> g(size_t(chunk.layout().total()));
  std::copy(chunk.grads(), chunk.grads() + g.size(), g.begin());  // host memory: the tests run the CPU backend
  if (!mesh || mesh->dp().size() == 1 || opt.end() - opt.begin() == chunk.layout().total()) return g;
  std::fill(g.begin(), g.begin() + opt.begin(), 0.f);
  std::fill(g.begin() + opt.end(), g.end(), 0.f);
  mesh->dp().all_reduce(g.data(), int64_t(g.size()));
  return g;
}

RunResult run_steps(const Config& cfg, ParallelMesh* mesh, int64_t steps) {
  auto kernels = make_kokkos_kernels();
  Trainer trainer(cfg, *kernels, mesh);
  RunResult r;
  for (int64_t s = 1; s <= steps; ++s) {
    const StepMetrics m = trainer.train_step(s);
    r.losses.push_back(m.loss);
    r.grad_norms.push_back(m.grad_norm);
    if (s == 1)
      for (size_t c = 0; c < trainer.chunks().size(); ++c)
        r.step1_grads.merge(by_name(*trainer.chunks()[c], reduced_gradients(trainer, mesh, c).data()));
  }
  for (auto& chunk : trainer.chunks()) r.final_params.merge(by_name(*chunk, chunk->params()));
  r.finishing_phases = trainer.gradient_finisher().last_phases();
  return r;
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

}  // namespace trident::test
