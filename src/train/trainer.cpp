#include "train/trainer.hpp"

#include <chrono>
#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "optim/lr_schedule.hpp"
#include "train/flops.hpp"

namespace trident {
namespace {

// Refuses what this build cannot do yet, naming it, instead of silently ignoring deck keys.
void require_supported(const Config& cfg, const ParallelMesh* mesh) {
  TRIDENT_CHECK(mesh || cfg.mesh.world_size() == 1, "a parallel layout needs a ParallelMesh");
  if (cfg.mesh.pp > 1) throw NotImplemented("pipeline parallelism (mesh.pp > 1)");
  if (cfg.mesh.dp > 1) throw NotImplemented("data parallelism (mesh.dp > 1)");
  if (cfg.runtime.backend == Backend::Cuda) throw NotImplemented("training on the cuda backend");
  if (!cfg.checkpoint.dir.empty()) throw NotImplemented("checkpoints (checkpoint.dir is set)");
  if (!cfg.runtime.trace.empty()) throw NotImplemented("the pipeline timeline trace (runtime.trace is set)");
  if (cfg.data.path.empty()) throw Error(fmt::format("{}: [data] path is empty: `train` needs training data", cfg.source));
}

}  // namespace

Trainer::Trainer(const Config& cfg, Kernels& kernels, ParallelMesh* mesh) : cfg_(cfg), k_(kernels), mesh_(mesh) {
  require_supported(cfg_, mesh_);
  TensorParallel tp;
  if (mesh_ && cfg_.mesh.tp > 1) tp = TensorParallel{&mesh_->tp(), cfg_.mesh.sequence_parallel};
  shapes_ = GptShapes::from(cfg_.model, cfg_.mesh.tp);
  model_ = std::make_unique<GptModel>(shapes_, k_, cfg_.train.recompute, cfg_.train.micro_batch, tp);
  optimizer_ = std::make_unique<AdamW>(model_->layout(), k_, cfg_.train);

  // The whole model is built on every rank, then each keeps its shard: the same global weights
  // whatever the layout. (Generating only the local slice is possible, since the initialisation is
  // counter-based, when models outgrow host memory.)
  const ParameterLayout& global = model_->global_layout();
  std::vector<float> whole(global.total());
  if (cfg_.model.init_from.empty()) {
    init_parameters(global, cfg_.model.init_std, cfg_.model.seed, whole.data());
  } else {
    load_hf_safetensors(global, cfg_.model.init_from, whole.data());
  }
  std::vector<float> host(model_->layout().total());
  shard_parameters(global, whole.data(), model_->layout(), host.data());
  k_.copy_to_device(model_->params(), host.data(), int64_t(host.size()));

  const auto& d = cfg_.data;
  train_stream_ = open_token_stream(d.format, d.path, cfg_.model.vocab_size);
  train_sampler_ = std::make_unique<BatchSampler>(*train_stream_, d.order, d.seed, shapes_.T, cfg_.train.global_batch);
  if (!d.val_path.empty()) {
    val_stream_ = open_token_stream(d.format, d.val_path, cfg_.model.vocab_size);
    val_sampler_ = std::make_unique<BatchSampler>(*val_stream_, DataOrder::Sequential, d.seed, shapes_.T,
                                                  cfg_.train.global_batch);
  }
  inputs_.resize(cfg_.train.micro_batch * shapes_.T);
  targets_.resize(inputs_.size());
  flops_per_token_ = model_flops_per_token(shapes_, parameter_count(cfg_.model));
  peak_tflops_ = cfg_.runtime.peak_tflops > 0 ? cfg_.runtime.peak_tflops : measure_cpu_gemm_tflops();
}

void Trainer::fill_micro_batch(const BatchSampler& sampler, int64_t step0, int64_t first_sample) {
  const int64_t T = shapes_.T;
  for (int64_t b = 0; b < cfg_.train.micro_batch; ++b)
    sampler.sample(step0, first_sample + b, inputs_.data() + b * T, targets_.data() + b * T);
}

StepMetrics Trainer::train_step(int64_t step) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const auto& t = cfg_.train;
  const int64_t micro_batches = cfg_.micro_batches_per_step();
  const double positions = double(t.global_batch) * double(shapes_.T);
  const int64_t n = model_->layout().total();

  k_.fill(model_->grads(), 0.f, n);
  double loss_sum = 0;
  for (int64_t mb = 0; mb < micro_batches; ++mb) {
    fill_micro_batch(*train_sampler_, step - 1, mb * t.micro_batch);
    loss_sum += model_->forward_backward(inputs_.data(), targets_.data(), float(1.0 / positions));
  }
  StepMetrics m;
  m.step = step;
  m.loss = loss_sum / positions;
  m.lr = learning_rate(t, step);
  model_->finish_gradients();
  m.grad_norm = model_->gradient_norm();
  clip_gradients(k_, model_->grads(), n, m.grad_norm, t.grad_clip);
  optimizer_->update(model_->params(), model_->grads(), m.lr, step);
  k_.fence();

  m.step_ms = std::chrono::duration<double, std::milli>(clock::now() - start).count();
  const double tokens = positions;
  m.tokens_per_s = tokens / (m.step_ms / 1e3);
  m.tflops = flops_per_token_ * tokens / (m.step_ms / 1e3) / 1e12;
  m.mfu = m.tflops / peak_tflops_;
  m.memory_gib = double(peak_rss_bytes()) / double(1 << 30);
  return m;
}

double Trainer::validation_loss() {
  TRIDENT_CHECK(val_sampler_, "validation asked for without data.val_path");
  const int64_t micro_batches = cfg_.micro_batches_per_step();
  double sum = 0;
  for (int64_t v = 0; v < cfg_.data.val_steps; ++v)
    for (int64_t mb = 0; mb < micro_batches; ++mb) {
      fill_micro_batch(*val_sampler_, v, mb * cfg_.train.micro_batch);
      sum += model_->forward_loss(inputs_.data(), targets_.data());
    }
  return sum / (double(cfg_.data.val_steps) * cfg_.train.global_batch * shapes_.T);
}

std::vector<StepMetrics> Trainer::run() {
  const auto& t = cfg_.train;
  const auto act = model_->activation_bytes();
  log::info("model: {} parameters ({} stored with vocabulary padding), {} layers, hidden {}, heads {}, vocab {}",
            parameter_count(cfg_.model), model_->layout().total(), shapes_.L, shapes_.C, shapes_.NH, shapes_.V);
  log::info("memory: parameters {:.1f} MiB, gradients {:.1f} MiB, AdamW state {:.1f} MiB, activations {:.1f} MiB "
            "saved ({} recompute) + {:.1f} MiB scratch",
            model_->layout().total() * 4 / 1048576.0, model_->layout().total() * 4 / 1048576.0,
            optimizer_->state_bytes() / 1048576.0, act.saved / 1048576.0, to_string(t.recompute),
            act.scratch / 1048576.0);
  log::info("data: {}; {} tokens per step in {} micro-batch(es) of {}", train_stream_->describe(),
            cfg_.tokens_per_step(), cfg_.micro_batches_per_step(), t.micro_batch);
  log::info("throughput reference: {:.3f} TFLOP/s per rank ({})", peak_tflops_,
            cfg_.runtime.peak_tflops > 0 ? "runtime.peak_tflops" : "measured sgemm rate of this CPU");

  std::unique_ptr<MetricsWriter> metrics;
  if (!cfg_.runtime.metrics.empty()) metrics = std::make_unique<MetricsWriter>(cfg_.runtime.metrics, false);
  std::vector<StepMetrics> history;
  double total_ms = 0;
  for (int64_t step = 1; step <= t.steps; ++step) {
    StepMetrics m = train_step(step);
    total_ms += m.step_ms;
    m.eta_s = total_ms / double(step) * double(t.steps - step) / 1e3;
    if (val_sampler_ && cfg_.data.val_every > 0 && step % cfg_.data.val_every == 0) m.val_loss = validation_loss();
    if (step % cfg_.runtime.log_every == 0 || step == 1 || step == t.steps || m.val_loss)
      log::info("{}", format_log_line(m, t.steps));
    if (metrics) metrics->write(m);
    if (!std::isfinite(m.loss)) throw Error(fmt::format("step {}: the loss is {}; training diverged", step, m.loss));
    history.push_back(m);
  }
  if (!history.empty()) {
    const double mean_ms = total_ms / double(history.size());
    const double tflops = flops_per_token_ * cfg_.tokens_per_step() / (mean_ms / 1e3) / 1e12;
    std::string comm;
    if (mesh_ && mesh_->tp().size() > 1)
      comm = fmt::format(" | TP comm {:.1f}% of step time ({:.1f} MiB moved by this rank)",
                         100 * mesh_->tp().counters().seconds * 1e3 / total_ms,
                         mesh_->tp().counters().total_bytes() / 1048576.0);
    log::info("summary: {} steps | loss {:.4f} -> {:.4f} | {:.1f} ms/step | {:.0f} tok/s | {:.3f} TFLOP/s | MFU {:.1f}%{}",
              history.size(), history.front().loss, history.back().loss, mean_ms,
              cfg_.tokens_per_step() / (mean_ms / 1e3), tflops, 100 * tflops / peak_tflops_, comm);
  }
  return history;
}

}  // namespace trident
