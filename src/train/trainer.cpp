#include "train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <new>
#include <optional>
#include <thread>
#include <cmath>
#include <vector>

#include <mpi.h>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "comm/watchdog.hpp"
#include "core/fault_injection.hpp"
#include "core/log.hpp"
#include "core/output_file.hpp"
#include "data_parallel/zero_partition.hpp"
#include "model/flops.hpp"
#include "optim/lr_schedule.hpp"
#include "pipeline/partition.hpp"
#include "safetensors/safetensors_set.hpp"
#include "train/checkpointing.hpp"
#include "train/op_profile_report.hpp"
#include "train/memory_report.hpp"
#include "train/preflight.hpp"
#include "train/peak_throughput.hpp"
#include "train/run_summary.hpp"
#include "train/stop_signals.hpp"

namespace trident {
namespace {

// Runs f; an allocation that fails inside it (std::bad_alloc, or the backend's "failed to allocate")
// becomes an Error naming what was being allocated, instead of an internal error.
template <class F> void allocating(const std::string& what, F&& f) {
  const auto fail = [&](const char* detail) {
    throw Error(fmt::format("out of memory while allocating {} ({}); the memory estimate before start-up is "
                            "`trident check`'s, and runtime.memory_check = true refuses such layouts early",
                            what, detail));
  };
  try {
    f();
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc& e) {
    fail(e.what());
  } catch (const std::runtime_error& e) {
    if (std::string(e.what()).find("failed to allocate") == std::string::npos) throw;
    fail(e.what());
  }
}

// Chrome trace category of an executor event: "forward", "backward", "send" or "recv".
std::string event_category(const std::string& name) {
  if (name.rfind("send ", 0) == 0) return "send";
  if (name.rfind("recv ", 0) == 0) return "recv";
  return name[0] == 'F' ? "forward" : "backward";
}

// Writes the step's metrics record; a failure (logged with the file and errno; the file keeps whole
// records only) is returned for the ranks to agree on at the step boundary.
OutputFailure write_metrics(MetricsWriter& metrics, const StepMetrics& m) {
  try {
    metrics.write(m);
    return OutputFailure::None;
  } catch (const OutputError& e) {
    log::error("{}", e.what());
    return e.retryable() ? OutputFailure::Retryable : OutputFailure::Permanent;
  }
}

}  // namespace

Trainer::Trainer(const Config& cfg, Kernels& kernels, ParallelMesh* mesh, Use use)
    : cfg_(cfg),
      profiled_(cfg.runtime.op_profile.empty() ? nullptr : std::make_unique<ProfiledKernels>(kernels)),
      k_(profiled_ ? *profiled_ : kernels),
      mesh_(mesh) {
  TRIDENT_CHECK(mesh_ || cfg_.mesh.world_size() == 1, "a parallel layout needs a ParallelMesh");
  check_supported(cfg_);
  k_.set_matmul_precision(cfg_.train.gemm_precision());
  if (!mesh_ || mesh_->world_rank() == 0) {  // what `trident check` refuses, with its messages
    check_output_paths(cfg_);
    check_checkpoint_and_model_paths(cfg_);
  }
  TensorParallel tp;
  if (mesh_ && cfg_.mesh.tp > 1) tp = TensorParallel{&mesh_->tp(), cfg_.mesh.sequence_parallel};
  shapes_ = GptShapes::from(cfg_.model, cfg_.mesh.tp);
  const int pp = cfg_.mesh.pp, v = cfg_.mesh.virtual_stages;
  const int stage = mesh_ ? mesh_->coord().pp : 0;
  const std::vector<int64_t> sizes = partition_layers(cfg_);
  // ZeRO-2 and 3 hold partitions instead (make_gradient_reducer), and a bf16 working copy below ZeRO-3
  // its patterns (model/bf16_working_copy.hpp): no whole-chunk fp32 buffer for them.
  const bool zero3 = cfg_.mesh.dp > 1 && cfg_.mesh.zero >= 3;
  const bool bf16_copy = cfg_.train.bf16_working_copy() && !zero3;
  const WholeBuffers whole{!zero3 && !bf16_copy, !(cfg_.mesh.dp > 1 && cfg_.mesh.zero >= 2)};
  allocating("the parameters and gradients of this rank's model chunks", [&] {
    for (int c = 0; c < v; ++c) {
      chunks_.push_back(std::make_unique<GptModel>(shapes_, k_, activation_policy(cfg_.train), cfg_.train.micro_batch,
                                                   tp, chunk_spec(sizes, int64_t(c) * pp + stage), whole));
    }
  });
  std::vector<GptModel*> raw;
  for (auto& chunk : chunks_) raw.push_back(chunk.get());
  // A bf16 working copy (train.bf16_parameters): its fp32 masters are the optimizer's (ZeRO-3: its
  // partitions, and its gathers round).
  if (bf16_copy) allocating("the bf16 working copy", [&] { working_copy_ = std::make_unique<Bf16WorkingCopy>(k_, raw); });
  make_gradient_reducer();
  allocating("the AdamW moments", [&] {
    for (int c = 0; c < v; ++c) {
      const auto& layout = chunks_[size_t(c)]->layout();
      optimizers_.push_back(std::make_unique<AdamW>(layout, k_, cfg_.train, reducer_ ? reducer_->shard_begin(c) : 0,
                                                    reducer_ ? reducer_->shard_end(c) : layout.total(),
                                                    working_copy_ ? working_copy_->view(c) : WorkingCopyView{}));
    }
  });

  initialise_parameters();
  executor_ = std::make_unique<PipelineExecutor>(raw, mesh_ && pp > 1 ? &mesh_->pp() : nullptr, cfg_.mesh.schedule, k_);
  executor_->set_tracing(!cfg_.runtime.trace.empty());

  flops_per_token_ = model_flops_per_token(cfg_.model);
  if (use == Use::Training) {  // (a model-only trainer reports no throughput)
    data_ = open_training_data(cfg_);
    samples_ = std::make_unique<TrainingSamples>(cfg_, k_, mesh_);
    const PeakThroughput peak = resolve_peak_throughput(cfg_, k_, mesh_ ? &mesh_->world() : nullptr);
    peak_tflops_ = peak.tflops;
    peak_source_ = peak.source;
  }
  finisher_ = std::make_unique<GradientFinisher>(shapes_, k_, mesh_, chunks_, optimizers_, reducer_.get());

  checkpoints_ = std::make_unique<TrainingCheckpoints>(cfg_, k_, mesh_, chunks_, optimizers_, reducer_.get());
  if (const auto ms = fault::armed_number(fault::kSlowStep)) slow_step_ = std::chrono::milliseconds(*ms);
  install_stop_signal_counters();  // cli_main did already; a Trainer built in a test needs them too
  stop_ = std::make_unique<StopSignals>(cfg_, mesh_ ? &mesh_->world() : nullptr);
  {
    const watchdog::Watch watch("checkpoint resume", watchdog::checkpoint_limit_s());
    first_step_ = checkpoints_->resume() + 1;
  }
  publish_working_copy();
}

// The working copy from the masters as they are now (initialised or loaded): each rank writes its
// range's patterns, and ZeRO 1/2 broadcast every range from its owner.
void Trainer::publish_working_copy() {
  if (!working_copy_) return;
  for (auto& optimizer : optimizers_) optimizer->write_working_copy();
  if (reducer_) reducer_->gather_parameters();
  k_.fence();
}

Trainer::~Trainer() = default;

// Each rank generates (or reads from model.init_from) only the TP slices of its own chunks, one
// tensor at a time: the same global weights whatever the layout, and no rank ever holds more of the
// model than its shard plus one tensor's staging buffer. ZeRO-3 keeps (and generates) only the
// elements of its DP range.
void Trainer::initialise_parameters() {
  std::optional<SafetensorsSet> file;
  if (!cfg_.model.init_from.empty()) file.emplace(cfg_.model.init_from);
  std::vector<float> staging;
  for (size_t c = 0; c < chunks_.size(); ++c) {
    GptModel& chunk = *chunks_[c];
    const bool whole_chunk = chunk.params() != nullptr;
    const int64_t begin = whole_chunk ? 0 : optimizers_[c]->begin();
    const int64_t end = whole_chunk ? chunk.layout().total() : optimizers_[c]->end();
    float* target = whole_chunk ? chunk.params() : range_parameters(c);
    for (const auto& t : chunk.layout().tensors()) {
      // This tensor's elements inside [begin, end), relative to the tensor.
      const int64_t first = std::max<int64_t>(begin - t.offset, 0);
      const int64_t last = std::min<int64_t>(end - t.offset, t.numel);
      if (first >= last) continue;
      staging.resize(size_t(file ? t.numel : last - first));
      const float* values = staging.data();
      if (file) {
        load_hf_tensor(*file, chunk.layout(), t, staging.data());
        values += first;
      } else {
        init_tensor_elements(t, shapes_, chunk.layout().tp_rank(), cfg_.model.init_std, cfg_.model.seed, first, last,
                             staging.data());
      }
      k_.copy_to_device(target + (t.offset + first - begin), values, last - first);
    }
  }
  k_.fence();
}

// DP rank r trains on samples [r*G/dp, (r+1)*G/dp) of every global batch of G samples, so the union
// over the DP group is exactly the serial run's batch.
void Trainer::fill_micro_batch(const BatchSampler& sampler, int64_t step0, int64_t micro_batch, int32_t* inputs,
                               int32_t* targets, int64_t scored_windows) const {
  const int64_t dp_rank = mesh_ ? mesh_->coord().dp : 0;
  const int64_t T = shapes_.T;
  const int64_t first = dp_rank * (cfg_.train.global_batch / cfg_.mesh.dp) + micro_batch * cfg_.train.micro_batch;
  for (int64_t b = 0; b < cfg_.train.micro_batch; ++b) {
    sampler.sample(step0, first + b, inputs + b * T, targets + b * T);
    if (step0 * cfg_.train.global_batch + first + b >= scored_windows) std::fill_n(targets + b * T, T, -1);
  }
}

void Trainer::make_gradient_reducer() {
  if (!mesh_ || mesh_->dp().size() == 1) return;
  std::vector<GptModel*> chunks;
  std::vector<int64_t> deferred;
  for (auto& chunk : chunks_) {
    chunks.push_back(chunk.get());
    // A tied embedding held by two stages is summed over the embedding group after backward; its
    // DP reduction waits for that sum (reduce_deferred). It is the layout's first tensor.
    const auto& layout = chunk->layout();
    const bool shared_wte = shapes_.tied && cfg_.mesh.pp > 1 && layout.wte() >= 0;
    TRIDENT_CHECK(!shared_wte || layout.wte() == 0, "internal: the token embedding is not the first tensor");
    deferred.push_back(shared_wte ? layout.find(layout.wte_name()).numel : 0);
  }
  GradientReducer::Options o;
  o.zero = cfg_.mesh.zero;
  o.bucket_elements = std::max<int64_t>(kZeroAlignment, int64_t(cfg_.mesh.bucket_mb * 1048576.0 / sizeof(float)));
  o.overlap = cfg_.mesh.overlap_grad_reduce;
  o.micro_batches = int(cfg_.micro_batches_per_step());
  o.bf16 = cfg_.mesh.grad_reduce_dtype == Precision::BF16;
  o.bf16_parameters = cfg_.train.bf16_working_copy();
  o.working_copy = working_copy_.get();
  reducer_ = std::make_unique<GradientReducer>(mesh_->dp(), k_, chunks, deferred, o);
}

StepMetrics Trainer::train_step(int64_t step) {
  using clock = std::chrono::steady_clock;
  TRIDENT_CHECK(data_.train_sampler, "a trainer built for its model only cannot train");
  const auto start = clock::now();
  watchdog::set_step(step);
  const auto& t = cfg_.train;
  const double positions = double(t.global_batch) * double(shapes_.T);

  for (auto& chunk : chunks_)
    if (chunk->grads()) k_.fill(chunk->grads(), 0.f, chunk->layout().total());  // (zero 2, 3: start_step zeroes)
  if (reducer_) reducer_->start_step();
  executor_->train(
      int(cfg_.micro_batches_per_step()),
      [&](int64_t mb, int32_t* inputs, int32_t* targets) { fill_micro_batch(*data_.train_sampler, step - 1, mb, inputs, targets); },
      float(1.0 / positions));
  pipeline_wait_s_ += executor_->last_wait_s();
  finisher_->finish(t.grad_clip);

  StepMetrics m;
  m.step = step;
  m.lr = learning_rate(t, step);
  if (working_copy_) working_copy_->check_released();
  for (size_t c = 0; c < chunks_.size(); ++c)
    optimizers_[c]->update(range_parameters(c), range_gradients(c), m.lr, step);
  if (reducer_) reducer_->gather_parameters();
  // The host reads the loss and the norm once, with the update queued behind them.
  double loss_sum = executor_->take_loss_sum();
  m.grad_norm = finisher_->take_norm();
  // The loss is known on the last stage of each DP replica; every rank reports the global batch's.
  if (mesh_ && mesh_->pp().size() > 1) mesh_->pp().broadcast_host(&loss_sum, 1, mesh_->pp().size() - 1);
  if (mesh_ && mesh_->dp().size() > 1) mesh_->dp().all_reduce_host(&loss_sum, 1);
  m.loss = loss_sum / positions;
  k_.fence();
  if (reducer_) m.dp_wait_ms = reducer_->last_exposed_s() * 1e3;
  m.memory = memory_account();
  if (slow_step_.count() > 0) std::this_thread::sleep_for(slow_step_);

  m.step_ms = std::chrono::duration<double, std::milli>(clock::now() - start).count();
  m.tokens_per_s = positions / (m.step_ms / 1e3);
  m.tflops = flops_per_token_ * positions / (m.step_ms / 1e3) / 1e12 / double(cfg_.mesh.world_size());
  m.mfu = m.tflops / peak_tflops_;
  if (!mfu_warned_ && m.mfu > 1) {
    mfu_warned_ = true;
    log::root_warn("{}", mfu_above_peak_warning(m.tflops, {peak_tflops_, peak_source_}));
  }
  m.peak_tflops = peak_tflops_;
  m.peak_source = peak_source_;
  m.memory_gib = double(m.memory.peak_rss) / double(1 << 30);
  m.backend_memory_gib = double(k_.peak_allocated_bytes()) / double(1 << 30);
  return m;
}

double Trainer::validation_loss() { return evaluate(cfg_.data.val_steps).mean_loss(); }

// The sequential sampler's window w starts at token w*T; with "all", the W = floor((size-1)/T) windows
// that fit whole are scored once, in ceil(W/G) batches, and the last batch's samples past W (which the
// sampler wraps to the start) are padding.
EvalTotals Trainer::evaluate(int64_t batches) {
  TRIDENT_CHECK(data_.val_sampler, "validation asked for without data.val_path");
  const BatchSampler& sampler = *data_.val_sampler;
  const int64_t G = cfg_.train.global_batch;
  EvalTotals totals;
  totals.windows = batches == kValStepsAll ? sampler.windows_per_epoch() : batches * G;
  totals.positions = totals.windows * shapes_.T;
  const int64_t steps = batches == kValStepsAll ? (totals.windows + G - 1) / G : batches;
  for (int64_t v = 0; v < steps; ++v)
    totals.loss_sum +=
        executor_->evaluate(int(cfg_.micro_batches_per_step()), [&](int64_t mb, int32_t* inputs, int32_t* targets) {
          fill_micro_batch(sampler, v, mb, inputs, targets, totals.windows);
        });
  if (mesh_ && mesh_->pp().size() > 1) mesh_->pp().broadcast_host(&totals.loss_sum, 1, mesh_->pp().size() - 1);
  if (mesh_ && mesh_->dp().size() > 1) mesh_->dp().all_reduce_host(&totals.loss_sum, 1);
  return totals;
}

OutputFailure Trainer::write_trace() const {
  // Every rank's events, gathered on world rank 0 into one Chrome trace (one process per rank).
  nlohmann::json mine = nlohmann::json::array();
  const int rank = mesh_ ? mesh_->world_rank() : 0;
  const Coord c = mesh_ ? mesh_->coord() : Coord{};
  mine.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank},
                  {"args", {{"name", fmt::format("rank {} (dp {}, pp {}, tp {})", rank, c.dp, c.pp, c.tp)}}}});
  for (const auto& e : executor_->trace())
    mine.push_back({{"name", e.name}, {"ph", "X"}, {"pid", rank}, {"tid", 0}, {"ts", e.start_us}, {"dur", e.duration_us},
                    {"cat", event_category(e.name)}});
  return write_gathered("[runtime] trace", cfg_.runtime.trace, mine.dump(), [](const std::vector<std::string>& texts) {
    nlohmann::json events = nlohmann::json::array();
    for (const std::string& text : texts)
      for (auto& e : nlohmann::json::parse(text)) events.push_back(e);
    return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() + "\n";
  }, "timeline written to {} (open it in chrome://tracing or ui.perfetto.dev)");
}

OutputFailure Trainer::write_op_profile(int64_t steps, double step_ms) const {
  const int rank = mesh_ ? mesh_->world_rank() : 0;
  const std::string mine = op_profile_json(*profiled_, rank, steps, step_ms).dump();
  return write_gathered("[runtime] op_profile", cfg_.runtime.op_profile, mine, [](const std::vector<std::string>& texts) {
    nlohmann::json ranks = nlohmann::json::array();
    for (const std::string& text : texts) ranks.push_back(nlohmann::json::parse(text));
    constexpr int kLoggedOps = 25;
    log::info("{}", format_op_profile(ranks.at(0), kLoggedOps));
    return nlohmann::json{{"ranks", ranks}}.dump(1) + "\n";
  }, "op profile written to {}");
}

OutputFailure Trainer::write_gathered(const char* what, const std::string& path, const std::string& mine,
                                      const std::function<std::string(const std::vector<std::string>&)>& compose,
                                      const char* written) const {
  const std::vector<std::string> texts = mesh_ ? mesh_->world().gather_strings_host(mine) : std::vector<std::string>{mine};
  int32_t failure = int32_t(OutputFailure::None);
  if (!mesh_ || mesh_->world_rank() == 0) {
    try {
      write_file_atomically(what, path, compose(texts));
      log::info(fmt::runtime(written), path);
    } catch (const OutputError& e) {
      log::error("{}; the run's other results stand (exit status {})", e.what(), kExitOutputFailed);
      failure = int32_t(e.retryable() ? OutputFailure::Retryable : OutputFailure::Permanent);
    }
  }
  if (mesh_) mesh_->world().broadcast_host(&failure, 1, 0);  // every rank exits with the same status
  return OutputFailure(failure);
}

float* Trainer::range_parameters(size_t c) const {
  if (optimizers_[c]->masters()) return optimizers_[c]->masters();
  return reducer_ ? reducer_->range_parameters(int(c)) : chunks_[c]->params();
}

std::vector<float> Trainer::working_parameters(size_t c) const {
  if (!working_copy_) return whole_parameters(c);
  std::vector<float> host(size_t(chunks_[c]->layout().total()));
  working_copy_->copy_to_host(int(c), host.data());
  return host;
}

std::string Trainer::sample_text(int64_t step) {
  GptModel& model = *chunks_.at(0);
  // (ZeRO-3: gathered; a bf16 working copy: its values widened)
  const std::vector<float> host = model.params() ? std::vector<float>{} : working_parameters(0);
  const std::string text = samples_->sample(model, model.params(), host, step);
  log::info("sample at step {}:\n---\n{}\n---", step, text);
  return text;
}

std::vector<float> Trainer::whole_parameters(size_t c) const {
  std::vector<float> host(size_t(chunks_[c]->layout().total()));
  const AdamW& optimizer = *optimizers_[c];
  const bool ranged = optimizer.begin() > 0 || optimizer.end() < int64_t(host.size());
  if (optimizer.masters() && ranged)
    reducer_->whole_from_ranges(int(c), optimizer.masters(), host.data());
  else if (optimizer.masters())
    k_.copy_to_host(host.data(), optimizer.masters(), int64_t(host.size()));
  else if (reducer_)
    reducer_->whole_parameters(int(c), host.data());
  else
    k_.copy_to_host(host.data(), chunks_[c]->params(), int64_t(host.size()));
  return host;
}

const float* Trainer::range_gradients(size_t c) const {
  return reducer_ ? reducer_->range_gradients(int(c)) : chunks_[c]->grads();
}

MemoryAccount Trainer::memory_account() const {
  MemoryAccount a;
  for (size_t c = 0; c < chunks_.size(); ++c) {
    const int64_t bytes = chunks_[c]->layout().total() * int64_t(sizeof(float));
    if (!reducer_) a.parameters += bytes;
    if (!reducer_) a.gradients += bytes;
    a.optimizer += optimizers_[c]->state_bytes();
    a.activations += chunks_[c]->activation_bytes().peak();
  }
  if (reducer_) a.gradients = reducer_->gradient_bytes();    // zero 2, 3: partitions and staging buffers
  if (reducer_) a.parameters = reducer_->parameter_bytes();  // zero 3: partitions and gathered copies
  if (working_copy_) a.parameters = working_copy_->bytes();  // its patterns and widened segments
  // The rest of what the backend handed out (pipeline boundary buffers, token and loss buffers,
  // reduction scratch), measured by its allocator rather than listed.
  a.buffers = std::max<int64_t>(0, k_.allocated_bytes() - (a.parameters + a.gradients + a.optimizer + a.activations));
  a.peak_rss = peak_rss_bytes();
  return a;
}

RunSummary Trainer::run_summary(const std::vector<StepMetrics>& history,
                                std::chrono::steady_clock::time_point start) const {
  RunSummary s;
  s.first_step = history.front().step;
  s.last_step = history.back().step;
  s.planned_steps = cfg_.train.steps;
  s.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  s.tokens = int64_t(history.size()) * cfg_.tokens_per_step();
  s.final_loss = history.back().loss;
  s.has_val_data = data_.val_sampler != nullptr;
  for (const auto& m : history)
    if (m.val_loss) {
      s.val_loss = m.val_loss;
      s.val_step = m.step;
    }
  s.epochs = epochs_read(*data_.train_sampler, data_.train_stream->size(), s.last_step);
  s.checkpoint = checkpoints_->last_written();
  s.checkpoint_step = checkpoints_->last_written_step();
  s.checkpoints_on = !cfg_.checkpoint.dir.empty();
  return s;
}

std::vector<StepMetrics> Trainer::run() {
  const auto& t = cfg_.train;
  int64_t params = 0, act_saved = 0, act_peak = 0;
  for (auto& chunk : chunks_) params += chunk->layout().total();
  log::info("model: {} parameters, {} layers, hidden {}, heads {}, vocab {} (stored {} with padding); this rank "
            "holds {} in {} chunk(s)",
            parameter_count(cfg_.model), shapes_.L, shapes_.C, shapes_.NH, shapes_.V, shapes_.Vp, params,
            chunks_.size());
  if (reducer_)
    log::info("data parallel: dp {}, zero {}: this rank updates {} of {} elements ({:.1f}%); buckets of {} MiB, "
              "reduction {}",
              cfg_.mesh.dp, cfg_.mesh.zero, optimizers_[0]->end() - optimizers_[0]->begin(),
              chunks_[0]->layout().total(),
              100.0 * double(optimizers_[0]->end() - optimizers_[0]->begin()) / double(chunks_[0]->layout().total()),
              cfg_.mesh.bucket_mb, cfg_.mesh.overlap_grad_reduce ? "overlapped with backward" : "after backward");
  log::info("memory per rank at start-up: {} (activations and most buffers are allocated by the first step)",
            describe(memory_account()));
  log::info("data: {}; {} tokens per step in {} micro-batch(es) of {}", data_.train_stream->describe(),
            cfg_.tokens_per_step(), cfg_.micro_batches_per_step(), t.micro_batch);
  log::info("throughput reference for MFU: {:.3f} TFLOP/s per rank ({})", peak_tflops_, peak_source_);
  const MatmulPrecision gemm = t.gemm_precision();
  const std::string attention = attention_follows_bf16(gemm, shapes_.HD)
                                    ? fmt::format("attention's products on bf16 operands too (head size {}); ", shapes_.HD)
                                    : "attention, ";
  if (t.precision == Precision::BF16)
    log::info("precision: bf16 (train.precision): GEMM operands in bf16 with fp32 sums, attention's {}; the "
              "activations kept for backward stored in bf16 except the residual stream; parameters, gradients, "
              "norms' statistics, loss and optimizer in fp32",
              attention_follows_bf16(gemm, shapes_.HD)
                  ? fmt::format("products too (head size {})", shapes_.HD)
                  : fmt::format("in fp32 (head size {}; bf16 attention is built for 64 and 128)", shapes_.HD));
  else if (gemm != MatmulPrecision::FP32)
    log::info("precision: fp32 with the linear layers' GEMM operands rounded to {} (train.matmul_precision), "
              "fp32 sums; {}norms, loss and optimizer in fp32",
              to_string(gemm), attention);

  std::unique_ptr<MetricsWriter> metrics;
  if (!cfg_.runtime.metrics.empty() && (!mesh_ || mesh_->world_rank() == 0)) {
    metrics = std::make_unique<MetricsWriter>(cfg_.runtime.metrics, first_step_ > 1, run_identity());
    if (first_step_ > 1) metrics->write_resume(first_step_ - 1);  // a resumed run appends after a marker
  }
  std::vector<StepMetrics> history;
  double total_ms = 0;
  std::optional<double> warmup_ms;  // runtime.op_profile: the first step's time, when the profile leaves it out
  mark_training_started();  // SIGTERM now means "checkpoint at the next step boundary"
  const auto run_start = std::chrono::steady_clock::now();
  for (int64_t step = first_step_; step <= t.steps; ++step) {
    StepMetrics m;
    if (step == first_step_)
      allocating("the activations and communication buffers of the first step", [&] { m = train_step(step); });
    else
      m = train_step(step);
    total_ms += m.step_ms;
    if (profiled_ && step == first_step_ && step < t.steps) {  // the first step warms up: not profiled
      profiled_->reset();
      warmup_ms = m.step_ms;
    }
    m.eta_s = total_ms / double(step - first_step_ + 1) * double(t.steps - step) / 1e3;
    if (data_.val_sampler && cfg_.data.val_every > 0 && step % cfg_.data.val_every == 0) m.val_loss = validation_loss();
    if (samples_ && samples_->due(step)) m.sample = sample_text(step);
    if (step % cfg_.runtime.log_every == 0 || step == first_step_ || step == t.steps || m.val_loss)
      log::info("{}", format_log_line(m, t.steps));
    if (step == 1) log::info("memory per rank after step 1: {}", describe(m.memory));
    if (const std::string line = epoch_end_line(*data_.train_sampler, data_.train_stream->size(), step); !line.empty())
      log::info("{}", line);
    const OutputFailure output = metrics ? write_metrics(*metrics, m) : OutputFailure::None;
    if (!std::isfinite(m.loss)) throw Error(fmt::format("step {}: the loss is {}; training diverged", step, m.loss));
    const StopDecision stop = stop_->poll(step, output);
    if (stop.checkpoint) request_checkpoint();
    {
      const watchdog::Watch watch("checkpoint write", watchdog::checkpoint_limit_s());
      checkpoints_->after_step(step, m.loss);
    }
    if (stop.checkpoint) stop_->checkpoint_done();
    history.push_back(m);
    if (stop.output_failed) exit_code_ = stop.exit_code;
    if (stop.exit && step < t.steps) {
      exit_code_ = stop.exit_code;
      log::warn("stopped after step {} of {} on {}{}; exit status {}", step, t.steps, stop.signal,
                stop.checkpoint ? " with a checkpoint: a rerun with checkpoint.resume = \"auto\" continues at the next step"
                                : " without a checkpoint",
                exit_code_);
      break;
    }
  }
  for (auto& chunk : chunks_) {
    act_saved += chunk->activation_bytes().saved * chunk->activation_bytes().peak_slots;
    act_peak += chunk->activation_bytes().peak();
  }
  if (!history.empty()) {
    const double mean_ms = total_ms / double(history.size());
    const double tflops = flops_per_token_ * cfg_.tokens_per_step() / (mean_ms / 1e3) / 1e12 / cfg_.mesh.world_size();
    std::string comm;
    if (mesh_ && mesh_->tp().size() > 1)
      comm += fmt::format(" | TP comm {:.1f}% of step time ({:.1f} MiB moved by this rank)",
                          100 * mesh_->tp().counters().seconds * 1e3 / total_ms,
                          mesh_->tp().counters().total_bytes() / 1048576.0);
    if (cfg_.mesh.pp > 1) comm += fmt::format(" | pipeline wait {:.1f}% of step time", 100 * pipeline_wait_s_ * 1e3 / total_ms);
    if (reducer_) {
      double waited_ms = 0;
      for (const auto& h : history) waited_ms += h.dp_wait_ms;
      comm += fmt::format(" | DP reduction waits {:.1f}% of step time ({:.1f} MiB reduced per step)",
                          100 * waited_ms / total_ms, reducer_->last_reduced_bytes() / 1048576.0);
    }
    log::info("summary: {} steps | loss {:.4f} -> {:.4f} | {:.1f} ms/step | {:.0f} tok/s | {:.3f} TFLOP/s per rank | "
              "MFU {:.1f}%{}",
              history.size(), history.front().loss, history.back().loss, mean_ms,
              cfg_.tokens_per_step() / (mean_ms / 1e3), tflops, 100 * tflops / peak_tflops_, comm);
  }
  if (!history.empty()) log::info("{}", format_run_summary(run_summary(history, run_start)));
  // Each pipeline stage holds different activations: the first rank of every stage reports its own.
  const bool reporter = !mesh_ || (mesh_->coord().tp == 0 && mesh_->coord().dp == 0);
  if (reporter && (cfg_.mesh.pp == 1 ? log::is_root() : true))
    spdlog::info("activations on pipeline stage {} ({} recompute): {:.1f} MiB saved for backward at the peak of {} "
                 "micro-batch(es) in flight, {:.1f} MiB with scratch",
                 mesh_ ? mesh_->coord().pp : 0, to_string(t.recompute), act_saved / 1048576.0,
                 chunks_[0]->activation_bytes().peak_slots, act_peak / 1048576.0);
  log_memory_per_rank(memory_account(), mesh_);
  if (!cfg_.runtime.trace.empty() && write_trace() != OutputFailure::None && exit_code_ == 0)
    exit_code_ = kExitOutputFailed;
  const int64_t profiled_steps = int64_t(history.size()) - (warmup_ms ? 1 : 0);
  if (profiled_ && profiled_steps > 0 &&
      write_op_profile(profiled_steps, (total_ms - warmup_ms.value_or(0.0)) / double(profiled_steps)) !=
          OutputFailure::None &&
      exit_code_ == 0)
    exit_code_ = kExitOutputFailed;
  return history;
}

}  // namespace trident
