#pragma once
// The resolved configuration of a run: what the input deck (TOML) says, after defaults, --set
// overrides and validation. Every module reads its own section; none parses TOML itself.
// Keys, defaults and ranges are defined once, in deck/schema.cpp, and documented in input/README.md.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/matmul_precision.hpp"

namespace trident {

enum class Schedule { GPipe, OneFOneB, Interleaved };
enum class LrSchedule { Constant, Cosine, Linear };
enum class Recompute { None, Full, Selective };
enum class Precision { FP32, BF16 };
enum class DataFormat { Text, LlmC, Megatron };
// The tokenizer that made the data's ids (what `ckpt export` ships with the model).
enum class Tokenizer { Gpt2, Bytes, None };
enum class DataOrder { Sequential, Shuffle };
enum class Backend { Cpu, Cuda };
enum class MpiWait { Block, Poll };
enum class Comm { Mpi, Nccl };
enum class OnSignal { CheckpointExit, CheckpointContinue };
// model.architecture: the tensor names and layout (Hugging Face's GPT2LMHeadModel or LlamaForCausalLM)
// and the defaults of the component keys below.
enum class Architecture { Gpt2, Llama };
enum class Norm { LayerNorm, RmsNorm };
enum class Positions { Learned, Rope };
enum class Mlp { Gelu, SwiGlu };

struct ModelConfig {
  int64_t vocab_size = 50257;
  int64_t seq_len = 1024;
  int64_t layers = 12;
  int64_t hidden = 768;
  int64_t heads = 12;
  int64_t kv_heads = 0;         // key/value heads (grouped-query attention); resolved to heads when 0 / absent
  int64_t ffn_hidden = 0;       // resolved when 0 / absent: 4*hidden (gelu), Llama's 8*hidden/3 up to 256 (swiglu)
  Architecture architecture = Architecture::Gpt2;
  // The components; unset keys take the architecture's (GPT-2: LayerNorm, learned positions, GELU,
  // biases, tied; Llama: RMSNorm, RoPE, SwiGLU, no biases, untied).
  Norm norm = Norm::LayerNorm;
  double norm_eps = 1e-5;
  Positions positions = Positions::Learned;
  double rope_theta = 10000.0;
  Mlp mlp = Mlp::Gelu;
  bool bias = true;             // biases of the linear layers (and LayerNorm's)
  bool tie_embeddings = true;
  double init_std = 0.02;
  uint64_t seed = 1234;
  std::string init_from;        // safetensors file with Hugging Face GPT-2 names; empty = random init
  int64_t vocab_pad_to = 128;   // pad the vocabulary to a multiple of lcm(vocab_pad_to, tp)

  int64_t head_dim() const { return hidden / heads; }
  // ffn_hidden and kv_heads as resolved by the deck (for a ModelConfig built without one: the defaults).
  int64_t ffn() const;
  int64_t kv() const { return kv_heads > 0 ? kv_heads : heads; }
};

struct MeshConfig {
  int tp = 1;
  int pp = 1;
  int dp = 1;
  std::string order = "tp-dp-pp";  // fastest-varying first; a permutation of tp, dp, pp
  Schedule schedule = Schedule::OneFOneB;
  int virtual_stages = 1;
  bool sequence_parallel = false;
  int zero = 0;                    // 0, 1 or 2
  bool strict_placement = false;   // TP group across nodes: error instead of warning
  std::vector<int64_t> layers_per_stage;  // empty = balanced automatically
  double bucket_mb = 25.0;         // DP gradient-reduction bucket size
  bool overlap_grad_reduce = true; // start each bucket's DP reduction during backward
  Precision grad_reduce_dtype = Precision::FP32;  // the element type of the DP gradient reduction

  int64_t world_size() const { return int64_t(tp) * pp * dp; }
};

struct TrainConfig {
  int64_t steps = 10;
  int64_t micro_batch = 1;   // sequences per micro-batch per DP rank
  int64_t global_batch = 8;  // sequences per optimizer step, summed over DP ranks
  double lr = 6e-4;
  double min_lr = 0.0;
  int64_t warmup_steps = 0;
  LrSchedule lr_schedule = LrSchedule::Cosine;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;    // 0 = off
  Recompute recompute = Recompute::None;
  Precision precision = Precision::FP32;
  MatmulPrecision matmul_precision = MatmulPrecision::FP32;  // the linear layers' GEMM operands
  bool bf16_parameters = true;  // under precision = "bf16": a bf16 working copy over fp32 masters
  double logits_chunk_mib = 256;  // the LM head's fp32 logits at most this many MiB at a time; 0: all rows
  int64_t logits_chunk_bytes() const { return int64_t(logits_chunk_mib * 1048576.0); }
  // The GEMM operands a run uses: bf16 under precision = "bf16" (the deck refuses tf32 with it).
  MatmulPrecision gemm_precision() const {
    return precision == Precision::BF16 ? MatmulPrecision::BF16 : matmul_precision;
  }
  // Whether the model computes with a bf16 working copy of its parameters whose fp32 masters AdamW
  // keeps (precision = "bf16" with bf16_parameters), or with the fp32 parameters themselves.
  bool bf16_working_copy() const { return precision == Precision::BF16 && bf16_parameters; }
  int64_t sample_every = 0;    // steps between samples of the model's text; 0 = never
  int64_t sample_tokens = 64;  // tokens per sample
  std::string sample_prompt;   // text the samples continue; empty: the end-of-text token (a newline for bytes)
};

// GPT-2's vocabulary: 50256 tokens and <|endoftext|> (50256).
constexpr int64_t kGpt2VocabSize = 50257;

// data.tokenizer when the deck does not say: bytes for text, GPT-2's for llm.c/Megatron ids of its
// vocabulary size, else none known.
inline Tokenizer default_tokenizer(DataFormat format, int64_t vocab_size) {
  if (format == DataFormat::Text) return Tokenizer::Bytes;
  return vocab_size == kGpt2VocabSize ? Tokenizer::Gpt2 : Tokenizer::None;
}

// data.val_steps = "all": every whole window of the validation data once.
constexpr int64_t kValStepsAll = 0;

struct DataConfig {
  DataFormat format = DataFormat::Text;
  std::string path;
  std::string val_path;      // empty = no validation
  DataOrder order = DataOrder::Sequential;
  uint64_t seed = 1234;      // shuffle order
  int64_t val_every = 0;     // 0 = never
  int64_t val_steps = 1;     // kValStepsAll: the whole validation data
  Tokenizer tokenizer = Tokenizer::Bytes;  // resolved: bytes for text, gpt2 for 50257-token llmc/megatron
};

struct CheckpointConfig {
  std::string dir;           // empty = no checkpoints
  int64_t every_steps = 0;   // 0 = off
  double every_minutes = 0;  // 0 = off
  int64_t keep = 2;          // newest checkpoints kept; 0 = all
  std::string resume = "auto";  // "auto", "required", "never" or a checkpoint path
  bool allow_fresh_restart = false;  // a restarted Slurm job (restart count > 0) may start fresh without a checkpoint
};

struct RuntimeConfig {
  Backend backend = Backend::Cpu;
  std::string metrics;       // JSON-lines path; empty = none
  int64_t log_every = 1;
  MpiWait mpi_wait = MpiWait::Block;
  Comm comm = Comm::Mpi;     // how tensors in the backend's memory travel; resolved: nccl on cuda, mpi on cpu
  double peak_tflops = 0;    // for MFU; 0 = the backend's own figure
  std::string trace;         // Chrome trace JSON path; empty = none
  std::string op_profile;    // per-operation time table (JSON) path; empty = none (kernels/profiled_kernels.hpp)
  double collective_timeout_s = 300;   // watchdog limit of one communication; 0 = off
  double checkpoint_timeout_s = 3600;  // watchdog limit of a checkpoint write or read; 0 = off
  bool memory_check = true;  // refuse to train a layout whose planner estimate exceeds the memory available
  OnSignal on_signal = OnSignal::CheckpointExit;  // what SIGUSR1 does after its checkpoint (train/stop_signals.hpp)
};

struct Config {
  ModelConfig model;
  MeshConfig mesh;
  TrainConfig train;
  DataConfig data;
  CheckpointConfig checkpoint;
  RuntimeConfig runtime;

  std::string source;         // the deck's path ("<string>" when parsed from text)
  std::string resolved_toml;  // the configuration after defaults and overrides, as TOML text
  std::vector<std::string> warnings;  // non-fatal findings of validation, to be logged once

  // Derived figures.
  int64_t micro_batches_per_step() const { return train.global_batch / (train.micro_batch * mesh.dp); }
  int64_t tokens_per_step() const { return train.global_batch * model.seq_len; }
};

// Exact parameter count of the GPT-2 model the config describes (unpadded vocabulary; the LM head
// counted once when tied). A validated deck's count fits; beyond int64 the checked form is empty.
int64_t parameter_count(const ModelConfig& m);
std::optional<int64_t> checked_parameter_count(const ModelConfig& m);

const char* to_string(Schedule v);
const char* to_string(LrSchedule v);
const char* to_string(Recompute v);
const char* to_string(Precision v);
const char* to_string(MatmulPrecision v);
const char* to_string(DataFormat v);
const char* to_string(Tokenizer v);
const char* to_string(DataOrder v);
const char* to_string(Backend v);
const char* to_string(MpiWait v);
const char* to_string(Comm v);
const char* to_string(OnSignal v);
const char* to_string(Architecture v);
const char* to_string(Norm v);
const char* to_string(Positions v);
const char* to_string(Mlp v);

// Llama's MLP width for a hidden size: 2/3 of 4*hidden, rounded up to a multiple of 256 (Meta's rule).
inline int64_t llama_ffn_hidden(int64_t hidden) { return (8 * hidden / 3 + 255) / 256 * 256; }

inline int64_t ModelConfig::ffn() const {
  if (ffn_hidden > 0) return ffn_hidden;
  return mlp == Mlp::SwiGlu ? llama_ffn_hidden(hidden) : 4 * hidden;
}

}  // namespace trident
