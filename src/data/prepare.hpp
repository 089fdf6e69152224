#pragma once
// `trident data prepare`: text files or JSONL -> GPT-2 tokens -> llm.c shards or a Megatron dataset.
//
// Every document is written as <|endoftext|> followed by its tokens (llm.c's convention: the token
// starts each document, so a window never mixes two documents without it). The first
// val_documents documents (non-empty, in input order) form the validation split, the rest the
// training split:
//   llmc      PREFIX_val_000000.bin ... then PREFIX_train_NNNNNN.bin, shard_tokens tokens per shard,
//             numbered across both splits (llm.c: the validation shard first)
//   megatron  PREFIX_val.bin/.idx and PREFIX_train.bin/.idx, one sequence per document
// Text that is not well-formed UTF-8 has each ill-formed sequence replaced by U+FFFD (Python's
// errors="replace"; counted and reported with the first file and byte offset), or, with
// invalid_utf8 = "error", is refused naming the file and offset. Empty documents are skipped and
// counted; blank JSONL lines are counted. Nothing else is dropped.
//
// Over MPI: every rank scans the inputs alike; each batch of documents is cut into one contiguous
// share per rank (by bytes), each rank tokenizes its share, and rank 0 gathers the tokens in rank
// order, which is document order, and writes them. The files are the same at any rank count.
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "data/text_documents.hpp"

namespace trident {

enum class PreparedFormat { llmc, megatron };

struct PrepareOptions {
  std::vector<std::string> inputs;
  std::string output_prefix;
  PreparedFormat format = PreparedFormat::llmc;
  TextInputFormat input_format = TextInputFormat::automatic;
  std::string json_key = "text";
  int64_t val_documents = 0;
  int64_t shard_tokens = 100'000'000;  // llm.c's fineweb shards
  // The tokenizer: GPT-2's built-in files unless vocab_json + merges or tokenizer_json are given.
  std::string vocab_json, merges, tokenizer_json;
  bool invalid_utf8_is_error = false;
  int64_t batch_bytes_per_rank = 8 << 20;  // text each rank tokenizes per round (256 MiB a round at most)
};

struct PrepareSummary {
  int64_t input_bytes = 0;
  int64_t documents = 0, val_documents = 0;  // written (non-empty)
  int64_t empty_documents = 0, blank_lines = 0;
  int64_t invalid_utf8_sequences = 0, documents_with_invalid_utf8 = 0;
  std::string first_invalid_utf8;  // "FILE byte OFFSET"
  int64_t tokens = 0, val_tokens = 0;
  std::vector<std::string> outputs;
  double seconds = 0;
};

// Collective over `comm`; the summary is complete on rank 0. Progress is logged by rank 0.
// Throws trident::Error for bad input (naming the file and line or offset) and OutputError.
PrepareSummary prepare_dataset(const PrepareOptions& options, MPI_Comm comm);

}  // namespace trident
