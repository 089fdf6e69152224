// `trident data prepare`: tokenizes text files or JSONL into llm.c shards or a Megatron dataset
// (src/data/prepare.hpp). Runs on every rank of the job: `mpiexec -n N trident data prepare ...`.
#include <mpi.h>

#include <algorithm>
#include <iostream>
#include <map>

#include "app/commands.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/log_streams.hpp"
#include "data/prepare.hpp"

namespace trident {
namespace {

void print_summary(const PrepareOptions& o, const PrepareSummary& s) {
  const double seconds = std::max(s.seconds, 1e-6);
  std::cout << fmt::format(
      "summary: {} documents ({} validation, {} training), {} tokens ({} validation, {} training), {} file(s); "
      "{:.1f} MB in {:.1f} s ({:.2f} MB/s, {:.3f} M tokens/s)\n",
      s.documents, s.val_documents, s.documents - s.val_documents, s.tokens, s.val_tokens, s.tokens - s.val_tokens,
      s.outputs.size(), s.input_bytes / 1e6, s.seconds, s.input_bytes / 1e6 / seconds, s.tokens / 1e6 / seconds);
  std::cout << fmt::format("  skipped: {} empty document(s), {} blank JSONL line(s)\n", s.empty_documents, s.blank_lines);
  if (s.invalid_utf8_sequences > 0)
    std::cout << fmt::format("  ill-formed UTF-8: {} sequence(s) in {} document(s) replaced by U+FFFD (first: {})\n",
                             s.invalid_utf8_sequences, s.documents_with_invalid_utf8, s.first_invalid_utf8);
  for (const std::string& path : s.outputs) std::cout << "  wrote " << path << "\n";
  if (o.format == PreparedFormat::llmc)
    std::cout << fmt::format("  deck: [data] format = \"llmc\", path = \"{0}_train_*.bin\"{1}\n", o.output_prefix,
                             s.val_documents > 0 ? fmt::format(", val_path = \"{}_val_*.bin\"", o.output_prefix) : "");
  else
    std::cout << fmt::format("  deck: [data] format = \"megatron\", path = \"{0}_train\"{1}\n", o.output_prefix,
                             s.val_documents > 0 ? fmt::format(", val_path = \"{}_val\"", o.output_prefix) : "");
}

}  // namespace

void add_data_command(CLI::App& app) {
  auto* data = app.add_subcommand("data", "Dataset tools");
  data->require_subcommand(1);
  auto* prepare = data->add_subcommand(
      "prepare", "Tokenize text files or JSONL with GPT-2's BPE into llm.c shards or a Megatron dataset");
  auto o = std::make_shared<PrepareOptions>();
  auto invalid = std::make_shared<std::string>("replace");
  prepare->add_option("inputs", o->inputs, "Input files: text (one document per file) or JSONL (one per line)")
      ->required();
  prepare->add_option("-o,--output", o->output_prefix,
                      "Output prefix: PREFIX_val_000000.bin, PREFIX_train_000001.bin, ... (llmc) or "
                      "PREFIX_{val,train}.{bin,idx} (megatron)")
      ->required();
  prepare->add_option("--format", o->format, "Output format")
      ->transform(CLI::CheckedTransformer(std::map<std::string, PreparedFormat>{
          {"llmc", PreparedFormat::llmc}, {"megatron", PreparedFormat::megatron}}))
      ->default_str("llmc");
  prepare->add_option("--input-format", o->input_format, "Input format (auto: jsonl for *.jsonl, text otherwise)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, TextInputFormat>{
          {"auto", TextInputFormat::automatic}, {"text", TextInputFormat::text}, {"jsonl", TextInputFormat::jsonl}}))
      ->default_str("auto");
  prepare->add_option("--json-key", o->json_key, "JSONL: the key of the document text")->capture_default_str();
  prepare->add_option("--val-documents", o->val_documents,
                      "The first N non-empty documents form the validation split")
      ->check(CLI::Range(int64_t(0), INT64_MAX))
      ->capture_default_str();
  prepare->add_option("--shard-tokens", o->shard_tokens, "llmc: tokens per shard")
      ->check(CLI::Range(int64_t(1), int64_t(INT32_MAX)))
      ->capture_default_str();
  prepare->add_option("--vocab", o->vocab_json, "vocab.json (encoder.json) of a byte-level BPE, with --merges "
                                                "(default: GPT-2's, built in)");
  prepare->add_option("--merges", o->merges, "merges.txt (vocab.bpe), with --vocab");
  prepare->add_option("--tokenizer-json", o->tokenizer_json, "A Hugging Face tokenizer.json (BPE model)")
      ->excludes("--vocab")
      ->excludes("--merges");
  prepare->add_option("--invalid-utf8", *invalid,
                      "Ill-formed UTF-8 in text files: replace each sequence by U+FFFD (counted), or error")
      ->check(CLI::IsMember({"replace", "error"}))
      ->capture_default_str();
  prepare->callback([o, invalid] {
    log::use_job_log_streams();
    o->invalid_utf8_is_error = *invalid == "error";
    const PrepareSummary summary = prepare_dataset(*o, MPI_COMM_WORLD);
    if (log::is_root()) print_summary(*o, summary);
  });
}

}  // namespace trident
