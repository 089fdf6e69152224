#include "deck/key_suggestions.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <vector>

#include "deck/schema.hpp"
#include "deck/toml_text.hpp"

namespace trident::deck {

// As their configs and command lines spell them; only names that a close-spelling search would not find.
const std::map<std::string, std::string>& other_tools_key_names() {
  static const std::map<std::string, std::string> names = {
      // [model]: nanoGPT / llm.c (n_layer, n_embd, block_size), Hugging Face (num_hidden_layers, ...),
      // Megatron-LM (num_layers, hidden_size, seq_length, ffn_hidden_size, init_method_std).
      {"n_layer", "model.layers"}, {"n_layers", "model.layers"}, {"num_layers", "model.layers"},
      {"num_hidden_layers", "model.layers"}, {"depth", "model.layers"},
      {"n_head", "model.heads"}, {"n_heads", "model.heads"}, {"num_heads", "model.heads"},
      {"num_attention_heads", "model.heads"},
      {"n_embd", "model.hidden"}, {"hidden_size", "model.hidden"}, {"d_model", "model.hidden"},
      {"dim", "model.hidden"}, {"channels", "model.hidden"},
      {"block_size", "model.seq_len"}, {"seq_length", "model.seq_len"}, {"sequence_length", "model.seq_len"},
      {"max_seq_len", "model.seq_len"}, {"context_length", "model.seq_len"},
      {"n_positions", "model.seq_len"}, {"max_position_embeddings", "model.seq_len"},
      {"ffn_hidden_size", "model.ffn_hidden"}, {"intermediate_size", "model.ffn_hidden"},
      {"n_inner", "model.ffn_hidden"},
      {"init_method_std", "model.init_std"}, {"initializer_range", "model.init_std"},
      {"tie_word_embeddings", "model.tie_embeddings"},
      {"untie_embeddings_and_output_weights", "model.tie_embeddings"},
      {"padded_vocab_size", "model.vocab_pad_to"}, {"make_vocab_size_divisible_by", "model.vocab_pad_to"},
      {"vocab", "model.vocab_size"}, {"n_vocab", "model.vocab_size"},
      // [mesh]: Megatron-LM, DeepSpeed.
      {"tensor_model_parallel_size", "mesh.tp"}, {"tensor_parallel_size", "mesh.tp"},
      {"pipeline_model_parallel_size", "mesh.pp"}, {"pipeline_parallel_size", "mesh.pp"},
      {"data_parallel_size", "mesh.dp"},
      {"virtual_pipeline_model_parallel_size", "mesh.virtual_stages"},
      {"zero_stage", "mesh.zero"}, {"zero_optimization", "mesh.zero"},
      {"sequence_parallelism", "mesh.sequence_parallel"},
      // [train]: nanoGPT (max_iters, learning_rate, warmup_iters, lr_decay_iters, grad_clip),
      // Hugging Face (max_steps, per_device_train_batch_size, max_grad_norm, lr_scheduler_type),
      // Megatron-LM (train_iters, micro_batch_size, global_batch_size, lr_warmup_iters, clip_grad).
      {"learning_rate", "train.lr"}, {"max_lr", "train.lr"},
      {"min_learning_rate", "train.min_lr"},
      {"warmup", "train.warmup_steps"}, {"warmup_iters", "train.warmup_steps"},
      {"lr_warmup_iters", "train.warmup_steps"}, {"lr_warmup_steps", "train.warmup_steps"},
      {"num_warmup_steps", "train.warmup_steps"},
      {"max_iters", "train.steps"}, {"max_steps", "train.steps"}, {"train_iters", "train.steps"},
      {"num_iterations", "train.steps"}, {"iterations", "train.steps"}, {"total_steps", "train.steps"},
      {"batch_size", "train.micro_batch"}, {"micro_batch_size", "train.micro_batch"},
      {"per_device_train_batch_size", "train.micro_batch"}, {"train_micro_batch_size_per_gpu", "train.micro_batch"},
      {"global_batch_size", "train.global_batch"}, {"total_batch_size", "train.global_batch"},
      {"train_batch_size", "train.global_batch"},
      {"lr_decay_style", "train.lr_schedule"}, {"lr_scheduler_type", "train.lr_schedule"},
      {"lr_scheduler", "train.lr_schedule"}, {"scheduler", "train.lr_schedule"},
      {"clip_grad", "train.grad_clip"}, {"max_grad_norm", "train.grad_clip"}, {"gradient_clipping", "train.grad_clip"},
      {"adam_beta1", "train.beta1"}, {"adam_beta2", "train.beta2"},
      {"adam_eps", "train.eps"}, {"adam_epsilon", "train.eps"},
      {"activation_checkpointing", "train.recompute"}, {"recompute_granularity", "train.recompute"},
      {"gradient_checkpointing", "train.recompute"},
      {"dtype", "train.precision"}, {"bf16", "train.precision"}, {"fp16", "train.precision"},
      {"tf32", "train.matmul_precision"}, {"allow_tf32", "train.matmul_precision"},
      {"float32_matmul_precision", "train.matmul_precision"},
      // [data]
      {"data_path", "data.path"}, {"train_data", "data.path"}, {"train_data_path", "data.path"},
      {"input_bin", "data.path"}, {"dataset", "data.path"},
      {"val_data", "data.val_path"}, {"valid_data_path", "data.val_path"}, {"input_val_bin", "data.val_path"},
      {"eval_interval", "data.val_every"}, {"val_loss_every", "data.val_every"},
      {"eval_steps", "data.val_every"},
      {"eval_iters", "data.val_steps"}, {"val_max_steps", "data.val_steps"},
      // [checkpoint]
      {"save", "checkpoint.dir"}, {"out_dir", "checkpoint.dir"}, {"output_dir", "checkpoint.dir"},
      {"save_dir", "checkpoint.dir"}, {"checkpoint_dir", "checkpoint.dir"},
      {"save_interval", "checkpoint.every_steps"}, {"save_steps", "checkpoint.every_steps"},
      {"checkpoint_every", "checkpoint.every_steps"},
      {"save_total_limit", "checkpoint.keep"}, {"load", "checkpoint.resume"},
      // [runtime]
      {"log_interval", "runtime.log_every"}, {"logging_steps", "runtime.log_every"},
      {"device", "runtime.backend"}};
  return names;
}

namespace {

std::string normalised(std::string key) {
  for (char& c : key) c = c == '-' ? '_' : char(std::tolower(static_cast<unsigned char>(c)));
  return key;
}

std::string shown(const std::string& section, const std::string& target_section, const std::string& target_key) {
  return target_section == section ? fmt::format("'{}'", target_key) : fmt::format("[{}] {}", target_section, target_key);
}

}  // namespace

std::string suggest_key(const std::string& section, const std::string& key) {
  const std::string word = normalised(key);
  std::vector<std::string> same_section;
  for (const auto& k : schema()) {
    if (k.section == section) same_section.push_back(k.key);
    else if (k.key == word) return shown(section, k.section, k.key);  // right key, wrong section
  }
  if (std::find(same_section.begin(), same_section.end(), word) != same_section.end())
    return fmt::format("'{}'", word);  // only the case or a '-' differs
  const auto other = other_tools_key_names().find(word);
  if (other != other_tools_key_names().end()) {
    const auto dot = other->second.find('.');
    return shown(section, other->second.substr(0, dot), other->second.substr(dot + 1));
  }
  const std::string close = closest_match(word, same_section, /*prefixes=*/true);
  return close.empty() ? "" : fmt::format("'{}'", close);
}

}  // namespace trident::deck
