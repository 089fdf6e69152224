#pragma once
// Token datasets and the batch sampler.
//
// A TokenStream is one long sequence of token ids, read from memory-mapped files:
//   text      any file; every byte is a token (vocabulary 256). For demos.
//   llmc      llm.c token shards: a header of 256 little-endian int32 (magic 20240520, version 1,
//             token count), then that many uint16 tokens. `path` may be a glob(3) pattern: the
//             matching shards are sorted by name (bytewise) and concatenated in that order.
//   megatron  Megatron-LM indexed dataset (<prefix>.idx + <prefix>.bin). `path` is the prefix or
//             either file. The .idx holds "MMIDIDX\0\0", uint64 version 1, uint8 dtype code,
//             uint64 sequence count S, uint64 document-index count D (Megatron writes the number of
//             entries of the document index array, i.e. documents + 1), then int32 sizes[S],
//             int64 byte pointers[S] into the .bin, int64 document_indices[D] (0 ... S). The
//             documents (their sequences, in order) are concatenated into one stream.
//             Integer dtypes only: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16.
// Headers and sizes are checked when a stream is opened; token ids are checked (0 <= id < vocab)
// when they are read, since datasets may be far larger than one run reads.
//
// The BatchSampler maps (global step, sample j of the global batch) to a window of seq_len + 1
// tokens (inputs = first seq_len, targets = last seq_len). The mapping depends only on the step,
// j, the stream and the seed: never on the parallel layout, so any split of j among data-parallel
// ranks (and any number of ranks) sees the same global batch.
//   sequential  window start = ((step*global_batch + j) * seq_len) mod size(); a window crossing
//               the end of the stream continues from token 0.
//   shuffle     w = step*global_batch + j, W = floor((size()-1)/seq_len) whole windows,
//               epoch e = w / W, window start = perm_e(w mod W) * seq_len, where perm_e is the
//               permutation of shuffle_permutation(seed, e, W) below.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/config.hpp"

namespace trident {

// The first int32 of an llm.c shard's header.
inline constexpr int32_t kLlmcMagic = 20240520;

class TokenStream {
 public:
  virtual ~TokenStream() = default;
  // Number of tokens in the stream.
  virtual int64_t size() const = 0;
  // Copies tokens [begin, begin+count) (0 <= begin, begin+count <= size()) as int32, checking that
  // every id lies in [0, vocab_size); throws trident::Error naming the file and offsets otherwise.
  virtual void read(int64_t begin, int64_t count, int32_t* out) const = 0;
  // One line for logs and error messages: format, path(s) and size.
  virtual std::string describe() const = 0;
};

// Opens a token stream; throws trident::Error for a missing/corrupt file, an empty glob, a dtype
// that is not an integer type, or (text) vocab_size < 256. Each call maps the files afresh, so
// every MPI rank has its own read-only mapping.
std::unique_ptr<TokenStream> open_token_stream(DataFormat format, const std::string& path,
                                               int64_t vocab_size);

// The shuffle permutation of [0, n) for (seed, epoch), exactly:
//   key = splitmix64(splitmix64(seed) + epoch); gen = std::mt19937_64(key)  (raw 64-bit outputs);
//   p = [0, 1, ..., n-1]; for i = n-1 down to 1: k = bounded(gen, i+1); swap(p[i], p[k]);
//   bounded(gen, b): Lemire's method: m = gen() * b as 128-bit; if low64(m) < b, let
//   t = (2^64 - b) mod b and draw again while low64(m) < t; return high64(m).
// Portable across standard libraries (no std::shuffle / distributions).
std::vector<int64_t> shuffle_permutation(uint64_t seed, uint64_t epoch, int64_t n);

class BatchSampler {
 public:
  // `stream` must outlive the sampler. Throws trident::Error when the stream holds fewer than
  // seq_len + 1 tokens, or seq_len / global_batch < 1.
  BatchSampler(const TokenStream& stream, DataOrder order, uint64_t seed, int64_t seq_len,
               int64_t global_batch);
  ~BatchSampler();
  BatchSampler(BatchSampler&&) noexcept;
  BatchSampler& operator=(BatchSampler&&) noexcept;

  // Inputs and targets (seq_len each) of sample j (0 <= j < global_batch) of 0-based global step s.
  // Thread-safe.
  void sample(int64_t step, int64_t j, int32_t* inputs, int32_t* targets) const;

  // Stream offset of the first input token of sample j of step s (the formula above).
  int64_t window_start(int64_t step, int64_t j) const;
  // W: whole windows per shuffle epoch, floor((size()-1)/seq_len).
  int64_t windows_per_epoch() const;
  int64_t seq_len() const;
  int64_t global_batch() const;
  DataOrder order() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trident
