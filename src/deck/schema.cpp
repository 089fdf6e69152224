#include "deck/schema.hpp"

#include "deck/toml_text.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <sstream>
#include <limits>
#include <utility>

namespace trident::deck {
namespace {

constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();

std::optional<ValueError> wrong_type(const toml::node& n) {
  return ValueError{fmt::format("wrong type ({})", toml_type_name(n))};
}

// A TOML integer given for a float key is converted (rounded to the nearest double when beyond 2^53).
double number_value(const toml::node& n) {
  if (const auto* i = n.as_integer()) return double(i->get());
  return n.as_floating_point()->get();
}

std::string range_text(int64_t lo, int64_t hi) { return fmt::format("an integer in [{}, {}]", lo, hi); }

// Defaults come from the member initialisers in config.hpp, so they are written in one place.
const Config& defaults() {
  static const Config c;
  return c;
}

template <class S, class T>
KeySpec integer(const char* sec, const char* key, S Config::*s, T S::*m, int64_t lo, int64_t hi, std::string doc,
                std::string default_text = "") {
  KeySpec k;
  k.section = sec;
  k.key = key;
  k.type = "integer";
  k.default_text = default_text.empty() ? fmt::format("{}", defaults().*s.*m) : default_text;
  k.allowed = range_text(lo, hi);
  k.doc = std::move(doc);
  k.apply = [=](const toml::node& n, Config& c) -> std::optional<ValueError> {
    auto v = n.value_exact<int64_t>();
    if (!n.is_integer() || !v) return wrong_type(n);
    if (*v < lo || *v > hi) return ValueError{"out of range"};
    c.*s.*m = static_cast<T>(*v);
    return std::nullopt;
  };
  k.emit = [=](const Config& c) { return fmt::format("{}", static_cast<int64_t>(c.*s.*m)); };
  return k;
}

template <class S>
KeySpec real(const char* sec, const char* key, double S::*m, S Config::*s, double lo, bool lo_open, double hi,
             std::string doc, bool hi_open = false) {
  KeySpec k;
  k.section = sec;
  k.key = key;
  k.type = "float";
  k.default_text = fmt::format("{}", defaults().*s.*m);
  const bool unbounded = std::isinf(hi);
  k.allowed = fmt::format("a number {} {}{}", lo_open ? ">" : ">=", lo,
                          unbounded ? std::string() : fmt::format(" and {} {}", hi_open ? "<" : "<=", hi));
  k.doc = std::move(doc);
  k.apply = [=](const toml::node& n, Config& c) -> std::optional<ValueError> {
    if (!n.is_number()) return wrong_type(n);
    const double v = number_value(n);
    if (!std::isfinite(v) || v < lo || (lo_open && v == lo) || v > hi || (hi_open && v == hi))
      return ValueError{"out of range"};
    // Training arithmetic is fp32: a value inside an open bound that rounds onto it (beta2 = 0.99999999
    // becomes 1.0f) would pass here and misbehave in the run.
    if ((lo_open && float(v) == float(lo)) || (hi_open && float(v) == float(hi)))
      return ValueError{fmt::format("out of range once rounded to fp32 ({})", float(v))};
    c.*s.*m = v;
    return std::nullopt;
  };
  k.emit = [=](const Config& c) { return toml_float(c.*s.*m); };
  return k;
}

template <class S>
KeySpec boolean(const char* sec, const char* key, bool S::*m, S Config::*s, std::string doc) {
  KeySpec k;
  k.section = sec;
  k.key = key;
  k.type = "boolean";
  k.default_text = defaults().*s.*m ? "true" : "false";
  k.allowed = "true or false";
  k.doc = std::move(doc);
  k.apply = [=](const toml::node& n, Config& c) -> std::optional<ValueError> {
    if (!n.is_boolean()) return wrong_type(n);
    c.*s.*m = n.value<bool>().value();
    return std::nullopt;
  };
  k.emit = [=](const Config& c) { return std::string(c.*s.*m ? "true" : "false"); };
  return k;
}

template <class S>
KeySpec text(const char* sec, const char* key, std::string S::*m, S Config::*s, std::string allowed, std::string doc) {
  KeySpec k;
  k.section = sec;
  k.key = key;
  k.type = "string";
  k.default_text = fmt::format("\"{}\"", defaults().*s.*m);
  k.allowed = std::move(allowed);
  k.doc = std::move(doc);
  k.apply = [=](const toml::node& n, Config& c) -> std::optional<ValueError> {
    if (!n.is_string()) return wrong_type(n);
    c.*s.*m = n.value<std::string>().value();
    return std::nullopt;
  };
  k.emit = [=](const Config& c) { return toml_string(c.*s.*m); };
  return k;
}

template <class S, class E>
KeySpec choice(const char* sec, const char* key, E S::*m, S Config::*s, std::vector<std::pair<std::string, E>> options,
               std::string doc, std::string default_text = "") {
  KeySpec k;
  k.section = sec;
  k.key = key;
  k.type = "string";
  std::string names;
  for (const auto& [name, value] : options) {
    names += fmt::format("{}\"{}\"", names.empty() ? "" : ", ", name);
    if (value == defaults().*s.*m) k.default_text = fmt::format("\"{}\"", name);
  }
  if (!default_text.empty()) k.default_text = std::move(default_text);
  k.allowed = "one of " + names;
  k.doc = std::move(doc);
  k.apply = [=](const toml::node& n, Config& c) -> std::optional<ValueError> {
    if (!n.is_string()) return wrong_type(n);
    const auto v = n.value<std::string>().value();
    for (const auto& [name, value] : options) {
      if (name == v) {
        c.*s.*m = value;
        return std::nullopt;
      }
    }
    return ValueError{"not an allowed value"};
  };
  k.emit = [=](const Config& c) {
    for (const auto& [name, value] : options)
      if (value == c.*s.*m) return toml_string(name);
    return std::string("\"\"");
  };
  return k;
}

KeySpec layers_per_stage() {
  KeySpec k;
  k.section = "mesh";
  k.key = "layers_per_stage";
  k.type = "integer array";
  k.default_text = "[] (balanced)";
  k.allowed = "an array of pp*virtual_stages integers in [1, 2147483647] that sum to model.layers";
  k.doc = "Layers of each pipeline chunk, in pipeline order; overrides the balanced partition "
          "(e.g. fewer layers on the stages that also hold the embedding or the LM head).";
  k.apply = [](const toml::node& n, Config& c) -> std::optional<ValueError> {
    const auto* arr = n.as_array();
    if (!arr) return wrong_type(n);
    std::vector<int64_t> v;
    for (const auto& e : *arr) {
      auto x = e.value_exact<int64_t>();
      if (!e.is_integer() || !x) return ValueError{"every element must be an integer"};
      if (*x < 1) return ValueError{"a stage with no layers"};
      if (*x > kMaxInt) return ValueError{fmt::format("an element above {} (model.layers' maximum)", kMaxInt)};
      v.push_back(*x);
    }
    c.mesh.layers_per_stage = std::move(v);
    return std::nullopt;
  };
  k.emit = [](const Config& c) { return fmt::format("[{}]", fmt::join(c.mesh.layers_per_stage, ", ")); };
  return k;
}

KeySpec mesh_order() {
  KeySpec k = text("mesh", "order", &MeshConfig::order, &Config::mesh,
                   "a permutation of tp, dp, pp joined by '-', fastest-varying first",
                   "How world ranks map to (tp, dp, pp) coordinates: the first name varies fastest with the "
                   "rank. Keep tp first so that a TP group is made of neighbouring ranks on one node.");
  auto base = k.apply;
  k.apply = [base](const toml::node& n, Config& c) -> std::optional<ValueError> {
    if (auto e = base(n, c)) return e;
    const std::string& o = c.mesh.order;
    for (const char* p : {"tp-dp-pp", "tp-pp-dp", "dp-tp-pp", "dp-pp-tp", "pp-tp-dp", "pp-dp-tp"})
      if (o == p) return std::nullopt;
    return ValueError{"not a permutation of tp, dp, pp"};
  };
  return k;
}

// An integer key that also takes one word, stored as `stored` (a value the integer range excludes).
template <class S, class T>
KeySpec integer_or_word(KeySpec k, const char* word, S Config::*s, T S::*m, T stored) {
  k.allowed = fmt::format("\"{}\" or {}", word, k.allowed);
  auto base = k.apply;
  const std::string w = word;
  k.apply = [base, w, s, m, stored](const toml::node& n, Config& c) -> std::optional<ValueError> {
    if (!n.is_string()) return base(n, c);
    if (n.value<std::string>().value() != w) return ValueError{fmt::format("neither an integer nor \"{}\"", w)};
    c.*s.*m = stored;
    return std::nullopt;
  };
  auto base_emit = k.emit;
  k.emit = [base_emit, w, s, m, stored](const Config& c) {
    return c.*s.*m == stored ? fmt::format("\"{}\"", w) : base_emit(c);
  };
  return k;
}

// mesh.dp: an integer, or "auto" (stored as 0) for world size / (tp*pp), resolved by the deck's rules
// once the world size is known (so the resolved deck holds the number).
KeySpec mesh_dp() {
  return integer_or_word(
      integer("mesh", "dp", &Config::mesh, &MeshConfig::dp, 1, 1 << 20,
              "Data-parallel replicas; \"auto\" = the number of ranks / (tp*pp), as the launch gives it."),
      "auto", &Config::mesh, &MeshConfig::dp, 0);
}

// data.val_steps: an integer, or "all" (kValStepsAll): every whole window of the validation data once.
KeySpec val_steps_key(int64_t big) {
  return integer_or_word(
      integer("data", "val_steps", &Config::data, &DataConfig::val_steps, 1, big,
              "Validation batches (of global_batch sequences) per evaluation; \"all\" = the whole validation "
              "data, every window of seq_len + 1 tokens once (the last batch padded with positions that are not "
              "scored)."),
      "all", &Config::data, &DataConfig::val_steps, kValStepsAll);
}

KeySpec resume_key() {
  return text("checkpoint", "resume", &CheckpointConfig::resume, &Config::checkpoint,
              "\"auto\", \"required\", \"never\" or the path of a checkpoint",
              "\"auto\": continue from the newest valid checkpoint in `dir`, or start fresh when there is none, "
              "except in a restarted Slurm job (SLURM_RESTART_COUNT > 0), which refuses to start over unless "
              "allow_fresh_restart; \"required\": as \"auto\" but never start fresh; \"never\": always start "
              "fresh; a path: resume from that checkpoint (an error if it is invalid).");
}

std::vector<KeySpec> build() {
  const int64_t big = kMaxInt;
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<KeySpec> k;
  // [model]
  k.push_back(integer("model", "vocab_size", &Config::model, &ModelConfig::vocab_size, 2, big,
                      "Vocabulary size (50257 for GPT-2; 256 for the byte-level \"text\" data format)."));
  k.push_back(integer("model", "seq_len", &Config::model, &ModelConfig::seq_len, 1, big,
                      "Sequence length (tokens per sample); also the number of learned position embeddings."));
  k.push_back(integer("model", "layers", &Config::model, &ModelConfig::layers, 1, big, "Transformer blocks."));
  k.push_back(integer("model", "hidden", &Config::model, &ModelConfig::hidden, 1, big,
                      "Model width; must be divisible by heads."));
  k.push_back(integer("model", "heads", &Config::model, &ModelConfig::heads, 1, big,
                      "Attention heads; must divide hidden and be divisible by mesh.tp."));
  k.push_back(integer("model", "kv_heads", &Config::model, &ModelConfig::kv_heads, 1, big,
                      "Key/value heads: grouped-query attention when fewer than heads (1: multi-query); must "
                      "divide heads; divisible by mesh.tp or dividing it (then each is replicated on tp/kv_heads "
                      "ranks).",
                      "heads"));
  k.push_back(integer("model", "ffn_hidden", &Config::model, &ModelConfig::ffn_hidden, 1, big,
                      "MLP inner width; must be divisible by mesh.tp.",
                      "4*hidden (gelu); 8*hidden/3 rounded up to a multiple of 256 (swiglu)"));
  k.push_back(choice("model", "architecture", &ModelConfig::architecture, &Config::model,
                     {{"gpt2", Architecture::Gpt2}, {"llama", Architecture::Llama}},
                     "Hugging Face's GPT-2 (GPT2LMHeadModel) or Llama (LlamaForCausalLM) tensor names and layout "
                     "(checkpoints, init_from, `ckpt export`), and the defaults of norm, positions, mlp, bias and "
                     "tie_embeddings. \"gpt2\" allows GPT-2's components only; \"llama\" any (an export for "
                     "Hugging Face's Llama needs its own: rmsnorm, rope, swiglu)."));
  k.push_back(choice("model", "norm", &ModelConfig::norm, &Config::model,
                     {{"layernorm", Norm::LayerNorm}, {"rmsnorm", Norm::RmsNorm}},
                     "Normalisation before attention, MLP and head: LayerNorm (weight and, with bias, a bias) or "
                     "RMSNorm (weight).",
                     "by architecture: \"layernorm\" (gpt2), \"rmsnorm\" (llama)"));
  k.push_back(real("model", "norm_eps", &ModelConfig::norm_eps, &Config::model, 0.0, true, 1.0,
                   "Epsilon of LayerNorm or RMSNorm (added to the variance or the mean square)."));
  k.push_back(choice("model", "positions", &ModelConfig::positions, &Config::model,
                     {{"learned", Positions::Learned}, {"rope", Positions::Rope}},
                     "Learned position embeddings (seq_len rows) or rotary embeddings of q and k (Hugging Face's "
                     "rotate-half convention, theta rope_theta).",
                     "by architecture: \"learned\" (gpt2), \"rope\" (llama)"));
  k.push_back(real("model", "rope_theta", &ModelConfig::rope_theta, &Config::model, 1.0, false, inf,
                   "RoPE base: dimension pair i of a head turns by position * rope_theta^(-2i/head size) "
                   "(10000 for Llama 2, 500000 for Llama 3)."));
  k.push_back(choice("model", "mlp", &ModelConfig::mlp, &Config::model,
                     {{"gelu", Mlp::Gelu}, {"swiglu", Mlp::SwiGlu}},
                     "MLP: GELU (tanh approximation) of one projection, or SwiGLU (silu(gate) * up, three matrices).",
                     "by architecture: \"gelu\" (gpt2), \"swiglu\" (llama)"));
  k.push_back(boolean("model", "bias", &ModelConfig::bias, &Config::model,
                      "Biases in the linear layers (and LayerNorm's bias). Default: true for gpt2, false for llama."));
  k.push_back(boolean("model", "tie_embeddings", &ModelConfig::tie_embeddings, &Config::model,
                      "The LM head reuses the token embedding (GPT-2); false gives a separate head matrix. Default: "
                      "true for gpt2, false for llama."));
  k.push_back(real("model", "init_std", &ModelConfig::init_std, &Config::model, 0.0, true, inf,
                   "Standard deviation of the normal initialisation of weights; the two residual output "
                   "projections of each layer use init_std/sqrt(2*layers)."));
  k.push_back(integer("model", "seed", &Config::model, &ModelConfig::seed, 0, big,
                      "Seed of the weight initialisation; the same seed gives the same global weights "
                      "whatever the parallel layout."));
  k.push_back(text("model", "init_from", &ModelConfig::init_from, &Config::model,
                   "empty, or the path of a safetensors file, an index json or a model directory",
                   "Initial weights from a safetensors file with Hugging Face names and layout of model.architecture "
                   "(fp32; GPT-2's, or Llama's: a single file or a directory whose model.safetensors.index.json "
                   "names the shards). A config.json beside the weights must describe the deck's model (checked at start-up)."));
  k.push_back(integer("model", "vocab_pad_to", &Config::model, &ModelConfig::vocab_pad_to, 1, 1 << 20,
                      "The stored vocabulary is padded to a multiple of lcm(vocab_pad_to, mesh.tp); padded "
                      "logits never enter the softmax and padding never reaches checkpoints or exports. The "
                      "default, 128 as Megatron-LM's, keeps the LM head's GEMM dimensions multiples of 16 bytes, "
                      "which cuBLASLt's fast tensor-core kernels need (GPT-2's 50257 becomes 50304); 1 stores the "
                      "vocabulary as it is."));
  // [mesh]
  k.push_back(integer("mesh", "tp", &Config::mesh, &MeshConfig::tp, 1, 1 << 16,
                      "Tensor-parallel degree (ranks that split every layer; keep them inside one node)."));
  k.push_back(integer("mesh", "pp", &Config::mesh, &MeshConfig::pp, 1, 1 << 16, "Pipeline-parallel stages."));
  k.push_back(mesh_dp());
  k.push_back(mesh_order());
  k.push_back(choice("mesh", "schedule", &MeshConfig::schedule, &Config::mesh,
                     {{"gpipe", Schedule::GPipe}, {"1f1b", Schedule::OneFOneB}, {"interleaved", Schedule::Interleaved}},
                     "Pipeline schedule: all forwards then all backwards (gpipe), one-forward-one-backward "
                     "(1f1b), or 1F1B over virtual_stages chunks per rank (interleaved)."));
  k.push_back(integer("mesh", "virtual_stages", &Config::mesh, &MeshConfig::virtual_stages, 1, 1 << 10,
                      "Model chunks per pipeline rank; > 1 requires schedule = \"interleaved\"."));
  k.push_back(boolean("mesh", "sequence_parallel", &MeshConfig::sequence_parallel, &Config::mesh,
                      "Shard LayerNorm, residual and other elementwise work along the sequence across the "
                      "TP group (all-gather/reduce-scatter instead of all-reduce); needs seq_len divisible by tp."));
  k.push_back(integer("mesh", "zero", &Config::mesh, &MeshConfig::zero, 0, 3,
                      "ZeRO stage: 0 replicated optimizer, 1 optimizer state sharded over DP, 2 gradients "
                      "sharded as well (each rank keeps its partition only), 3 parameters too (gathered per "
                      "layer for forward and backward; pp = 1 only)."));
  k.push_back(boolean("mesh", "strict_placement", &MeshConfig::strict_placement, &Config::mesh,
                      "A TP group that spans nodes is an error instead of a warning."));
  k.push_back(layers_per_stage());
  k.push_back(real("mesh", "bucket_mb", &MeshConfig::bucket_mb, &Config::mesh, 0.0, true, 1 << 16,
                   "Size in MiB of the gradient buckets whose DP reduction overlaps backward (zero 0, 1; "
                   "zero >= 2 reduces per layer)."));
  k.push_back(boolean("mesh", "overlap_grad_reduce", &MeshConfig::overlap_grad_reduce, &Config::mesh,
                      "Start each gradient bucket's DP reduction as soon as backward has finished it (last "
                      "micro-batch; with zero >= 2 each layer's, every micro-batch); false waits for each "
                      "reduction before backward goes on."));
  k.push_back(choice("mesh", "grad_reduce_dtype", &MeshConfig::grad_reduce_dtype, &Config::mesh,
                     {{"fp32", Precision::FP32}, {"bf16", Precision::BF16}},
                     "The element type of the data-parallel gradient all-reduce: bf16 sends half the bytes (each "
                     "rank's gradients rounded to bf16, every partial sum rounded to bf16 as NCCL's bf16 "
                     "reduction does, the result widened into the fp32 gradients; under zero 2 and 3 each micro-batch's "
                     "segments reduced to their owners so, and summed there in fp32)."));
  // [train]
  k.push_back(integer("train", "steps", &Config::train, &TrainConfig::steps, 0, int64_t(1) << 40,
                      "Optimizer steps to run (counted from 1; a resumed run continues up to this number)."));
  k.push_back(integer("train", "micro_batch", &Config::train, &TrainConfig::micro_batch, 1, big,
                      "Sequences per micro-batch per DP rank."));
  k.push_back(integer("train", "global_batch", &Config::train, &TrainConfig::global_batch, 1, big,
                      "Sequences per optimizer step over all DP ranks; divisible by micro_batch*dp "
                      "(the quotient is the number of accumulated micro-batches)."));
  k.push_back(real("train", "lr", &TrainConfig::lr, &Config::train, 0.0, false, inf, "Peak learning rate."));
  k.push_back(real("train", "min_lr", &TrainConfig::min_lr, &Config::train, 0.0, false, inf,
                   "Learning rate at the end of the cosine or linear decay; <= lr."));
  k.push_back(integer("train", "warmup_steps", &Config::train, &TrainConfig::warmup_steps, 0, int64_t(1) << 40,
                      "Steps of linear warm-up from lr/warmup_steps to lr."));
  k.push_back(choice("train", "lr_schedule", &TrainConfig::lr_schedule, &Config::train,
                     {{"constant", LrSchedule::Constant}, {"cosine", LrSchedule::Cosine}, {"linear", LrSchedule::Linear}},
                     "After warm-up: constant lr, or cosine / linear decay from lr to min_lr at `steps`."));
  k.push_back(real("train", "weight_decay", &TrainConfig::weight_decay, &Config::train, 0.0, false, inf,
                   "AdamW decoupled weight decay, applied to tensors of 2 or more dimensions only."));
  k.push_back(real("train", "beta1", &TrainConfig::beta1, &Config::train, 0.0, false, 1.0, "AdamW beta1.", true));
  k.push_back(real("train", "beta2", &TrainConfig::beta2, &Config::train, 0.0, false, 1.0, "AdamW beta2.", true));
  k.push_back(real("train", "eps", &TrainConfig::eps, &Config::train, 0.0, true, 1.0, "AdamW epsilon."));
  k.push_back(real("train", "grad_clip", &TrainConfig::grad_clip, &Config::train, 0.0, false, inf,
                   "Clip the global gradient norm to this value; 0 turns clipping off."));
  k.push_back(choice("train", "recompute", &TrainConfig::recompute, &Config::train,
                     {{"none", Recompute::None}, {"full", Recompute::Full}, {"selective", Recompute::Selective}},
                     "Activation checkpointing: keep everything (none), keep only each layer's input and "
                     "recompute the layer in backward (full), or recompute only the attention core (selective)."));
  k.push_back(choice("train", "precision", &TrainConfig::precision, &Config::train,
                     {{"fp32", Precision::FP32}, {"bf16", Precision::BF16}},
                     "Arithmetic precision. bf16: GEMM (and, at head sizes 64 and 128, attention) operands in bf16 "
                     "with fp32 sums, as matmul_precision = \"bf16\", and the activations kept for backward stored in "
                     "bf16 (half the bytes), rounded where they are produced, except the residual stream; the "
                     "parameters as bf16_parameters says. Gradients, norm statistics, loss and optimizer moments stay "
                     "fp32. Either backend."));
  k.push_back(choice("train", "matmul_precision", &TrainConfig::matmul_precision, &Config::train,
                     {{"fp32", MatmulPrecision::FP32}, {"tf32", MatmulPrecision::TF32}, {"bf16", MatmulPrecision::BF16}},
                     "The operands of the linear layers' GEMMs: exact fp32, or rounded to TF32 or bfloat16 with fp32 "
                     "sums and results (PyTorch's float32 matmul precision highest/high/medium). cuda: tensor cores; "
                     "cpu: the same rounding, then sgemm. bf16 also rounds attention's products' operands (q, k, v, "
                     "the probabilities; backward the output gradient, P and dS) at head sizes 64 and 128 (cuda: "
                     "tensor-core flash attention); other head sizes, TF32, decoding, norms, loss and optimizer "
                     "stay fp32. precision = \"bf16\" implies bf16 here and refuses tf32."));
  k.push_back(boolean("train", "bf16_parameters", &TrainConfig::bf16_parameters, &Config::train,
                      "Under precision = \"bf16\": true, the model computes with a bf16 working copy of its "
                      "parameters (stored in bf16, 2 bytes a parameter, read as bf16 by the GEMMs and the token "
                      "embedding, each layer and the position embedding widened to fp32 while it runs for the rest; "
                      "as Megatron-LM's bf16, except that what the model reads in fp32, the biases, norms and "
                      "position embedding, keeps its fp32 master values, as under autocast) while AdamW updates fp32 masters (the optimizer's ZeRO "
                      "range; ZeRO-3's partitions), which checkpoints save, and the ZeRO parameter broadcast and "
                      "gathers move bf16 (those fp32); false, with the fp32 parameters themselves "
                      "(PyTorch's autocast), no masters, fp32 broadcast and gathers. No effect under fp32."));
  k.push_back(real("train", "logits_chunk_mib", &TrainConfig::logits_chunk_mib, &Config::train, 0.0, false, inf,
                   "The LM head computes the logits, the cross-entropy and their backward over the micro-batch's "
                   "positions in chunks whose fp32 logits take at most this many MiB (at least one position), so "
                   "the [micro_batch * seq_len, vocab] logits are never stored whole; 0 = all positions at once. "
                   "Only the LM head weight's gradient sums in another order."));
  k.push_back(integer("train", "sample_every", &Config::train, &TrainConfig::sample_every, 0, int64_t(1) << 40,
                      "Every this many steps, print a sample of the model's text (temperature 1, seeded by the step) "
                      "and write it to the metrics; 0 = never. Needs pp = 1."));
  k.push_back(integer("train", "sample_tokens", &Config::train, &TrainConfig::sample_tokens, 1, int64_t(1) << 20,
                      "Tokens per sample (at most seq_len minus the prompt's)."));
  k.push_back(text("train", "sample_prompt", &TrainConfig::sample_prompt, &Config::train, "any text",
                   "Text the samples continue, in data.tokenizer; empty: the end-of-text token (gpt2), a newline "
                   "(bytes), token 0 (none)."));
  // [data]
  k.push_back(choice("data", "format", &DataConfig::format, &Config::data,
                     {{"text", DataFormat::Text}, {"llmc", DataFormat::LlmC}, {"megatron", DataFormat::Megatron}},
                     "Token file format: any text file as bytes (vocab 256), llm.c token shards (path may be "
                     "a glob), or a Megatron-LM indexed dataset (.bin/.idx prefix)."));
  k.push_back(choice("data", "tokenizer", &DataConfig::tokenizer, &Config::data,
                     {{"gpt2", Tokenizer::Gpt2}, {"bytes", Tokenizer::Bytes}, {"none", Tokenizer::None}},
                     "The tokenizer that made the data's ids: GPT-2's BPE (`trident data prepare`), bytes (format "
                     "\"text\"), or none known. `ckpt export` writes its files (vocab.json, merges.txt, "
                     "tokenizer_config.json, generation_config.json) beside the model for gpt2.",
                     "\"bytes\" for text, \"gpt2\" for llmc/megatron with vocab_size 50257, else \"none\""));
  k.push_back(text("data", "path", &DataConfig::path, &Config::data, "a file path (or glob for llmc)",
                   "Training data; relative paths are relative to the deck's directory. Required by `train`."));
  k.push_back(text("data", "val_path", &DataConfig::val_path, &Config::data, "empty, or a file path",
                   "Validation data in the same format; empty turns validation off."));
  k.push_back(choice("data", "order", &DataConfig::order, &Config::data,
                     {{"sequential", DataOrder::Sequential}, {"shuffle", DataOrder::Shuffle}},
                     "Sample order: consecutive windows, or a seeded permutation of windows per epoch "
                     "(the same for every parallel layout)."));
  k.push_back(integer("data", "seed", &Config::data, &DataConfig::seed, 0, big, "Seed of the shuffle order."));
  k.push_back(integer("data", "val_every", &Config::data, &DataConfig::val_every, 0, int64_t(1) << 40,
                      "Evaluate the validation loss every this many steps; 0 = never."));
  k.push_back(val_steps_key(big));
  // [checkpoint]
  k.push_back(text("checkpoint", "dir", &CheckpointConfig::dir, &Config::checkpoint, "empty, or a directory path",
                   "Where checkpoints are written; empty = no checkpoints."));
  k.push_back(integer("checkpoint", "every_steps", &Config::checkpoint, &CheckpointConfig::every_steps, 0,
                      int64_t(1) << 40, "Write a checkpoint every this many steps; 0 = off."));
  k.push_back(real("checkpoint", "every_minutes", &CheckpointConfig::every_minutes, &Config::checkpoint, 0.0, false,
                   inf, "Write a checkpoint when this many minutes have passed since the last; 0 = off."));
  k.push_back(integer("checkpoint", "keep", &Config::checkpoint, &CheckpointConfig::keep, 0, big,
                      "Newest checkpoints kept; older ones are deleted; 0 keeps all."));
  k.push_back(resume_key());
  k.push_back(boolean("checkpoint", "allow_fresh_restart", &CheckpointConfig::allow_fresh_restart, &Config::checkpoint,
                      "A restarted Slurm job whose checkpoint.dir holds no checkpoint starts fresh from step 0 "
                      "instead of refusing (exit 2): set it when the first run stopped before its first checkpoint."));
  // [runtime]
  k.push_back(choice("runtime", "backend", &RuntimeConfig::backend, &Config::runtime,
                     {{"cpu", Backend::Cpu}, {"cuda", Backend::Cuda}},
                     "Compute backend: Kokkos kernels on the host, or CUDA kernels with cuBLAS and NCCL."));
  k.push_back(text("runtime", "metrics", &RuntimeConfig::metrics, &Config::runtime, "empty, or a file path",
                   "JSON-lines file with one object per step (step, loss, lr, grad_norm, step_ms, tokens_per_s, "
                   "mfu, val_loss, dp_wait_ms, memory_bytes by kind); empty = none."));
  k.push_back(integer("runtime", "log_every", &Config::runtime, &RuntimeConfig::log_every, 1, big,
                      "Print a progress line every this many steps."));
  k.push_back(choice("runtime", "mpi_wait", &RuntimeConfig::mpi_wait, &Config::runtime,
                     {{"block", MpiWait::Block}, {"poll", MpiWait::Poll}},
                     "How MPI waits: MPICH's blocking calls, or MPI_Test with a short sleep (much faster "
                     "when there are more ranks than cores)."));
  k.push_back(choice("runtime", "comm", &RuntimeConfig::comm, &Config::runtime,
                     {{"mpi", Comm::Mpi}, {"nccl", Comm::Nccl}},
                     "How tensors in the backend's memory travel between ranks. nccl: NCCL on the GPU (one GPU per "
                     "rank). mpi: MPI; on the cuda backend GPU buffers are staged through pinned host memory, so "
                     "several ranks may share one GPU (how every layout is tested on a one-GPU machine). The cpu "
                     "backend always uses mpi. Host-side values (losses, norms, signals) always go over MPI.",
                     "\"nccl\" on cuda, \"mpi\" on cpu"));
  k.push_back(real("runtime", "peak_tflops", &RuntimeConfig::peak_tflops, &Config::runtime, 0.0, false, inf,
                   "Peak TFLOP/s per rank used for MFU; 0 = the backend's own: on a GPU the dense bf16 figure of "
                   "NVIDIA's data sheet for the device's product (clock-derived for a GPU not in trident's table), "
                   "on the CPU the measured sgemm peak."));
  k.push_back(text("runtime", "trace", &RuntimeConfig::trace, &Config::runtime, "empty, or a file path",
                   "Chrome trace JSON of the per-stage timeline; empty = none."));
  k.push_back(text("runtime", "op_profile", &RuntimeConfig::op_profile, &Config::runtime, "empty, or a file path",
                   "Time every backend operation (each waited for in turn, so nothing overlaps and each "
                   "includes one wait's latency) from the second step on (a validation or sample in those steps "
                   "counts too), and write the table of time per "
                   "operation and shape, every rank's, to this JSON file; rank 0's is logged. For machines "
                   "without a profiler; steps run slower. Empty = none."));
  k.push_back(real("runtime", "collective_timeout_s", &RuntimeConfig::collective_timeout_s, &Config::runtime, 0.0,
                   false, inf,
                   "Watchdog: a collective or send/receive that has not completed after this many seconds ends "
                   "the job (exit code 4), naming the operation, the group, the step and the ranks that did not "
                   "arrive; 0 = off."));
  k.push_back(real("runtime", "checkpoint_timeout_s", &RuntimeConfig::checkpoint_timeout_s, &Config::runtime, 0.0,
                   false, inf,
                   "Watchdog limit of a checkpoint write or resume, file system time included (the longer of this "
                   "and collective_timeout_s); 0 = no limit of its own (its communications keep "
                   "collective_timeout_s)."));
  k.push_back(boolean("runtime", "memory_check", &RuntimeConfig::memory_check, &Config::runtime,
                      "`train` compares the planner's per-rank memory estimate with the memory available to each "
                      "rank (MemAvailable or the cgroup limit, shared by the ranks of a node) and refuses a layout "
                      "that does not fit; false skips the check."));
  k.push_back(choice("runtime", "on_signal", &RuntimeConfig::on_signal, &Config::runtime,
                     {{"checkpoint-exit", OnSignal::CheckpointExit},
                      {"checkpoint-continue", OnSignal::CheckpointContinue}},
                     "What SIGUSR1 (Slurm's `--signal=USR1@N`, `scancel --signal=USR1`) does: every rank agrees on "
                     "the next step boundary, a checkpoint is written after that step, then the run exits with status "
                     "75 (checkpoint-exit; jobs/train.sbatch requeues the job on it) or goes on (checkpoint-continue). "
                     "SIGTERM (time limit, scancel, preemption) and SIGINT (Ctrl-C) always checkpoint and exit 75; "
                     "a second SIGINT ends the run at once (exit 130). Without [checkpoint] dir, SIGUSR1 is logged "
                     "and SIGTERM (SIGINT) ends the run (exit 143, 130)."));
  return k;
}

}  // namespace

std::string toml_float(double v) {
  std::string t = fmt::format("{}", v);  // shortest representation that reads back exactly
  if (t.find_first_of(".eEn") == std::string::npos) t += ".0";  // keep it a TOML float
  return t;
}

std::string toml_string(const std::string& v) {
  std::ostringstream os;
  os << toml::value<std::string>(v);
  return os.str();
}

const std::vector<KeySpec>& schema() {
  static const std::vector<KeySpec> s = build();
  return s;
}

const std::vector<std::string>& sections() {
  static const std::vector<std::string> s = {"model", "mesh", "train", "data", "checkpoint", "runtime"};
  return s;
}

}  // namespace trident::deck
