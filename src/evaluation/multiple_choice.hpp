#pragma once
// Multiple-choice evaluation in HellaSwag's JSONL format, scored as llm.c scores it: each ending is
// appended to the context (" " + ending, tokenized apart from the context) and ranked by the model's mean
// cross-entropy over the ending's tokens (the prediction is the lowest; llm.c's "acc_norm"); the
// lowest total cross-entropy is reported beside it ("acc"). One line per example:
//   {"ctx": "...", "endings": ["...", ...], "label": k, ...}   (other fields are ignored)
// Every example must have the same number of endings (HellaSwag: 4), decoded side by side as the KV-cache
// decoder's batch. A context too long for seq_len loses tokens from its start (counted, reported).
#include <cstdint>
#include <string>
#include <vector>

#include "generate/decoder.hpp"
#include "text/text_codec.hpp"

namespace trident {

struct ChoiceExample {
  int64_t line = 0;  // in the file, from 1
  std::vector<int32_t> context;
  std::vector<std::vector<int32_t>> endings;
  int64_t label = 0;
};

// Reads and tokenizes every example; throws trident::Error naming FILE:LINE for a line that is not such
// an object, an out-of-range label, an empty ending, or a different number of endings than the first.
std::vector<ChoiceExample> read_hellaswag(const std::string& path, text::TextCodec& codec);

struct ChoiceScore {
  std::vector<double> mean_loss, sum_loss;  // per ending
  int64_t prediction = 0;                    // lowest mean loss
  int64_t prediction_by_sum = 0;             // lowest total loss
  int64_t context_tokens_dropped = 0;        // from the context's start, to fit seq_len
};

// Scores one example; decoder.batch() must equal its number of endings. Collective over the decoder's
// TP group.
ChoiceScore score_example(Decoder& decoder, const ChoiceExample& example);

}  // namespace trident
