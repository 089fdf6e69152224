#pragma once
// Incremental decoding of a GPT-2 or Llama-shaped model with a KV cache, on any compute backend, with
// tensor parallelism.
//
// Each layer keeps the qkv rows of every token fed so far ([batch, max_len, (NH + 2 KVH) HD / tp] per
// layer: the K and V the later tokens attend to, with RoPE applied at their positions, and the Q rows
// beside them, which are never read again; keeping the fused layout lets the training model's
// attention kernel read the cache as it is). Feeding n tokens
// runs only those n rows through the layers: their qkv rows go into the cache at positions
// [length, length + n), and Kernels::attention_forward_rows attends each to the cache up to itself. The
// first call (the prompt) feeds many rows at once; every later call one row per sequence.
//
// The batch's sequences advance side by side (the same number of tokens each call). With tp > 1 the
// weights are this rank's shard (heads, MLP columns and vocabulary rows split as in training; see
// model/gpt.hpp), each row-parallel GEMM's output is all-reduced over the TP group, and the logits'
// vocabulary shards are gathered, so every rank of the group returns the same full logits.
#include <cstdint>
#include <vector>

#include "comm/group.hpp"
#include "kernels.hpp"
#include "model/parameters.hpp"

namespace trident {

class Decoder {
 public:
  // `params` (backend memory) holds this TP rank's shard of the whole model in `layout` (pp = 1, as a
  // GptModel over ChunkSpec::whole_model() keeps it); tp null or of size 1: no tensor parallelism.
  // batch sequences of at most max_len <= shapes.T tokens each.
  Decoder(const GptShapes& shapes, const ParameterLayout& layout, const float* params, Kernels& kernels, Group* tp,
          int64_t batch, int64_t max_len);
  ~Decoder();
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  // Appends n tokens to every sequence (tokens: host, [batch, n] row-major) and returns the logits
  // (host, over the V real vocabulary entries) of each sequence's last new position, [batch, V], or
  // with all_positions of every new position, [batch, n, V]. Collective over the TP group.
  std::vector<float> feed(const int32_t* tokens, int64_t n, bool all_positions = false);
  // Appends n tokens as feed() does and returns each new position's cross-entropy against `targets`
  // (host, [batch, n]; a negative target is not scored: 0), [batch, n]: computed where the logits are
  // (vocab-parallel over the TP group, as in training; the logits are never gathered). For scoring
  // completions (multiple-choice evaluation).
  std::vector<float> feed_losses(const int32_t* tokens, int64_t n, const int32_t* targets);
  // Tokens fed so far per sequence.
  int64_t length() const { return length_; }
  // Forgets every sequence (the cache is overwritten from position 0 on).
  void reset() { length_ = 0; }
  int64_t batch() const { return batch_; }
  int64_t max_len() const { return max_len_; }
  // Bytes of backend memory held (KV cache and scratch).
  int64_t bytes() const { return bytes_; }

 private:
  float* take(int64_t n);
  // Makes the scratch buffers hold `rows` rows (grown as needed, never shrunk).
  void reserve(int64_t rows);
  void layer(int64_t l, int64_t n);
  // LayerNorm or RMSNorm of `rows` rows of x into ln_ (offsets into the parameters; bias -1 for none).
  void norm(const float* x, int64_t rows, int64_t weight_offset, int64_t bias_offset);
  const float* weight(int64_t offset) const;  // null for offset -1
  // Sum over the TP group (row-parallel outputs, the vocab-parallel embedding).
  void reduce(float* x, int64_t count);
  // Runs the new rows through the embedding and the layers (x_ holds their output).
  void run_layers(const int32_t* tokens, int64_t n);
  // Final LayerNorm and LM head of `rows` rows of `top` into logits_ (this rank's vocabulary shard).
  void head(const float* top, int64_t rows);
  std::vector<float> logits(int64_t n, bool all_positions);

  GptShapes s_;
  ParameterLayout layout_;
  const float* params_;
  Kernels& k_;
  Group* tp_;
  int64_t batch_, max_len_, length_ = 0;
  int64_t Cl_, Fl_, NHl_, Vl_;  // this rank's attention width, MLP width, heads, vocabulary rows
  int64_t KVHl_, QKVl_;         // this rank's kv heads and q|k|v row width
  float* rope_table_ = nullptr;  // RoPE: [max_len, HD/2, 2]
  int64_t rows_ = 0;            // rows the scratch buffers hold
  int64_t bytes_ = 0;
  std::vector<float*> cache_;   // per layer [batch, max_len, 3 Cl]
  int32_t* tokens_ = nullptr;
  int32_t* targets_ = nullptr;
  float *x_ = nullptr, *ln_ = nullptr, *qkv_ = nullptr, *atty_ = nullptr, *branch_ = nullptr, *fch_ = nullptr,
        *fchg_ = nullptr, *mean_ = nullptr, *rstd_ = nullptr, *logits_ = nullptr, *losses_ = nullptr,
        *rowmax_ = nullptr, *sumexp_ = nullptr;
  std::vector<void*> owned_;    // the cache and token buffer
  std::vector<void*> scratch_;  // freed and remade by reserve()
};

}  // namespace trident
