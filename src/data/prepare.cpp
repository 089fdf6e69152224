#include "data/prepare.hpp"

#include <glob.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>

#include "core/error.hpp"
#include "core/log.hpp"
#include "data/llmc_writer.hpp"
#include "data/megatron_writer.hpp"
#include "text/bpe_tokenizer.hpp"
#include "text/tokenizer_files.hpp"
#include "text/utf8.hpp"

namespace trident {
namespace {

using Clock = std::chrono::steady_clock;
// Bounds what rank 0 holds (4 bytes a token) and keeps a round's token count within MPI's int counts.
constexpr int64_t kMaxRoundBytes = int64_t(256) << 20;

text::BpeVocabulary load_vocabulary(const PrepareOptions& o) {
  if (!o.tokenizer_json.empty()) return text::read_tokenizer_json(o.tokenizer_json);
  if (!o.vocab_json.empty() || !o.merges.empty()) {
    if (o.vocab_json.empty() || o.merges.empty()) throw Error("--vocab and --merges go together");
    return text::read_vocab_and_merges(o.vocab_json, o.merges);
  }
  return text::gpt2_vocabulary();
}

// Refuses a missing output directory, and to write over the files of an earlier run: fewer new shards would leave old ones behind,
// which a training glob (PREFIX_train_*.bin) would then read as well.
void refuse_existing_outputs(const PrepareOptions& o) {
  const std::filesystem::path dir = std::filesystem::path(o.output_prefix).parent_path();
  std::error_code ec;
  if (!dir.empty() && !std::filesystem::is_directory(dir, ec))
    throw Error(fmt::format("--output {}: the directory {} does not exist", o.output_prefix, dir.string()));
  const std::vector<std::string> patterns =
      o.format == PreparedFormat::llmc
          ? std::vector<std::string>{o.output_prefix + "_val_*.bin", o.output_prefix + "_train_*.bin"}
          : std::vector<std::string>{o.output_prefix + "_val.bin", o.output_prefix + "_val.idx",
                                     o.output_prefix + "_train.bin", o.output_prefix + "_train.idx"};
  for (const std::string& pattern : patterns) {
    glob_t g{};
    const bool found = ::glob(pattern.c_str(), GLOB_NOSORT, nullptr, &g) == 0 && g.gl_pathc > 0;
    const std::string first = found ? g.gl_pathv[0] : "";
    ::globfree(&g);
    if (found)
      throw Error(fmt::format("{} exists (an earlier output): remove the files {} or choose another --output", first,
                              pattern));
  }
}

// Per-rank figures of a batch, gathered on rank 0 with the tokens.
enum Stat { kTokens, kEmpty, kInvalidSequences, kInvalidDocuments, kFirstInvalidFile, kFirstInvalidOffset, kStats };

// The documents [begin[r], begin[r+1]) of a batch are rank r's: contiguous, about equal in bytes.
std::vector<size_t> share_bounds(const std::vector<RawDocument>& batch, int ranks) {
  int64_t total = 0;
  for (const RawDocument& d : batch) total += static_cast<int64_t>(d.bytes.size()) + 1;
  std::vector<size_t> begin(ranks + 1, batch.size());
  begin[0] = 0;
  int64_t before = 0;
  int rank = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    // document i goes to the rank whose slice of [0, total) holds its first byte
    const int owner = static_cast<int>(before * ranks / total);
    while (rank < owner) begin[++rank] = i;
    before += static_cast<int64_t>(batch[i].bytes.size()) + 1;
  }
  return begin;
}

// Routes each written document to its split and file (rank 0).
class SplitWriter {
 public:
  SplitWriter(const PrepareOptions& o, int64_t vocab_size) : o_(o), vocab_size_(vocab_size) {
    if (o.format == PreparedFormat::llmc) llmc_.emplace(o.output_prefix, o.shard_tokens);
  }

  void add(const uint32_t* tokens, size_t count) {
    const bool val = documents_ < o_.val_documents;
    if (documents_ == 0 || documents_ == o_.val_documents) start_split(val ? "val" : "train");
    if (llmc_) {
      llmc_->write(tokens, count);
    } else {
      (val ? val_ : train_)->add_document(tokens, count);
    }
    ++documents_;
  }

  std::vector<std::string> finish() {
    if (documents_ <= o_.val_documents)
      throw Error(fmt::format("the inputs hold {} non-empty document(s): --val-documents {} leaves none for training",
                              documents_, o_.val_documents));
    if (llmc_) return llmc_->finish();
    std::vector<std::string> outputs;
    for (MegatronWriter* w : {val_.get(), train_.get()}) {
      if (w == nullptr) continue;
      for (std::string& path : w->finish()) outputs.push_back(std::move(path));
    }
    return outputs;
  }

 private:
  void start_split(const std::string& split) {
    if (llmc_) {
      llmc_->begin_split(split);
    } else {
      (split == "val" ? val_ : train_) = std::make_unique<MegatronWriter>(o_.output_prefix + "_" + split, vocab_size_);
    }
  }

  const PrepareOptions& o_;
  int64_t vocab_size_;
  int64_t documents_ = 0;
  std::optional<LlmcShardWriter> llmc_;
  std::unique_ptr<MegatronWriter> val_, train_;
};

// Tokenizes this rank's documents: each non-empty one as <|endoftext|> + its tokens.
class ShareTokenizer {
 public:
  ShareTokenizer(const PrepareOptions& o, const DocumentScanner& scanner)
      : o_(o), scanner_(scanner), tokenizer_(load_vocabulary(o)), eot_(tokenizer_.token_id("<|endoftext|>")) {}

  int64_t vocab_size() const { return tokenizer_.vocab_size(); }

  // Fills tokens, per-document counts (0: empty, skipped) and the Stat figures.
  void run(const RawDocument* docs, size_t count, std::vector<uint32_t>& tokens, std::vector<int64_t>& doc_tokens,
           int64_t (&stats)[kStats]) {
    tokens.clear();
    doc_tokens.clear();
    std::fill(std::begin(stats), std::end(stats), 0);
    stats[kFirstInvalidFile] = -1;
    for (size_t i = 0; i < count; ++i) {
      const RawDocument& doc = docs[i];
      std::string_view text = document_text(scanner_, doc, o_.json_key, parsed_);
      if (text.empty()) {
        ++stats[kEmpty];
        doc_tokens.push_back(0);
        continue;
      }
      const size_t bad = text::first_invalid_utf8(text);
      if (bad != text.size()) {  // (only in a text file: the JSON parser refuses ill-formed UTF-8)
        if (o_.invalid_utf8_is_error)
          throw Error(fmt::format("{}: ill-formed UTF-8 at byte {} (--invalid-utf8 replace would write U+FFFD for it)",
                                  scanner_.path(doc.file), doc.offset + static_cast<int64_t>(bad)));
        repaired_.clear();
        stats[kInvalidSequences] += text::append_repaired_utf8(text, repaired_);
        if (stats[kInvalidDocuments]++ == 0) {
          stats[kFirstInvalidFile] = doc.file;
          stats[kFirstInvalidOffset] = doc.offset + static_cast<int64_t>(bad);
        }
        text = repaired_;
      }
      const size_t first = tokens.size();
      tokens.push_back(eot_);
      tokenizer_.encode(text, tokens);
      doc_tokens.push_back(static_cast<int64_t>(tokens.size() - first));
    }
    stats[kTokens] = static_cast<int64_t>(tokens.size());
  }

 private:
  const PrepareOptions& o_;
  const DocumentScanner& scanner_;
  text::BpeTokenizer tokenizer_;
  uint32_t eot_;
  std::string parsed_, repaired_;
};

std::vector<int> to_int_counts(const std::vector<int64_t>& counts, const char* what) {
  std::vector<int> out;
  for (const int64_t c : counts) {
    TRIDENT_CHECK(c <= INT32_MAX, "a batch's {} exceed MPI's count limit", what);
    out.push_back(static_cast<int>(c));
  }
  return out;
}

std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> displs(counts.size(), 0);
  for (size_t r = 1; r < counts.size(); ++r) displs[r] = displs[r - 1] + counts[r - 1];
  return displs;
}

}  // namespace

PrepareSummary prepare_dataset(const PrepareOptions& o, MPI_Comm comm) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  TRIDENT_CHECK(!o.inputs.empty(), "no input files");
  TRIDENT_CHECK(o.val_documents >= 0, "--val-documents {} is negative", o.val_documents);
  refuse_existing_outputs(o);
  const auto start = Clock::now();
  DocumentScanner scanner(o.inputs, o.input_format);
  ShareTokenizer share_tokenizer(o, scanner);
  if (o.format == PreparedFormat::llmc && share_tokenizer.vocab_size() > 65536)
    throw Error(fmt::format("llm.c shards hold uint16 tokens: a vocabulary of {} needs --format megatron",
                            share_tokenizer.vocab_size()));
  std::optional<SplitWriter> writer;
  if (rank == 0) writer.emplace(o, share_tokenizer.vocab_size());

  PrepareSummary summary;
  summary.input_bytes = scanner.total_bytes();
  std::vector<RawDocument> batch;
  std::vector<uint32_t> tokens, all_tokens;
  std::vector<int64_t> doc_tokens, all_doc_tokens;
  int64_t stats[kStats];
  std::vector<int64_t> all_stats(static_cast<size_t>(kStats) * ranks);
  int64_t bytes_done = 0;
  auto last_progress = start;
  const int64_t round_bytes = std::min<int64_t>(o.batch_bytes_per_rank * ranks, kMaxRoundBytes);
  while (scanner.next_batch(round_bytes, batch)) {
    const std::vector<size_t> bounds = share_bounds(batch, ranks);
    share_tokenizer.run(batch.data() + bounds[rank], bounds[rank + 1] - bounds[rank], tokens, doc_tokens, stats);

    MPI_Gather(stats, kStats, MPI_INT64_T, all_stats.data(), kStats, MPI_INT64_T, 0, comm);
    std::vector<int64_t> docs_per_rank(ranks), tokens_per_rank(ranks);
    for (int r = 0; r < ranks; ++r) {
      docs_per_rank[r] = static_cast<int64_t>(bounds[r + 1] - bounds[r]);
      tokens_per_rank[r] = all_stats[static_cast<size_t>(r) * kStats + kTokens];
    }
    const std::vector<int> doc_counts = to_int_counts(docs_per_rank, "documents");
    const std::vector<int> token_counts = to_int_counts(tokens_per_rank, "tokens");
    all_doc_tokens.resize(batch.size());
    MPI_Gatherv(doc_tokens.data(), static_cast<int>(doc_tokens.size()), MPI_INT64_T, all_doc_tokens.data(),
                doc_counts.data(), displacements(doc_counts).data(), MPI_INT64_T, 0, comm);
    if (rank == 0) {
      int64_t batch_tokens = 0;
      for (const int64_t t : tokens_per_rank) batch_tokens += t;
      all_tokens.resize(static_cast<size_t>(batch_tokens));
    }
    MPI_Gatherv(tokens.data(), static_cast<int>(tokens.size()), MPI_UINT32_T, all_tokens.data(), token_counts.data(),
                displacements(token_counts).data(), MPI_UINT32_T, 0, comm);
    for (const RawDocument& d : batch) bytes_done += static_cast<int64_t>(d.bytes.size()) + (d.line > 0 ? 1 : 0);
    if (rank != 0) continue;

    size_t at = 0;
    for (const int64_t n : all_doc_tokens) {
      if (n == 0) continue;
      if (summary.documents < o.val_documents) {
        ++summary.val_documents;
        summary.val_tokens += n;
      }
      writer->add(all_tokens.data() + at, static_cast<size_t>(n));
      at += static_cast<size_t>(n);
      ++summary.documents;
      summary.tokens += n;
    }
    for (int r = 0; r < ranks; ++r) {
      const int64_t* s = &all_stats[static_cast<size_t>(r) * kStats];
      summary.empty_documents += s[kEmpty];
      if (s[kInvalidDocuments] > 0 && summary.first_invalid_utf8.empty())
        summary.first_invalid_utf8 = fmt::format("{} byte {}", scanner.path(static_cast<int>(s[kFirstInvalidFile])),
                                                 s[kFirstInvalidOffset]);
      summary.invalid_utf8_sequences += s[kInvalidSequences];
      summary.documents_with_invalid_utf8 += s[kInvalidDocuments];
    }
    const auto now = Clock::now();
    const double seconds = std::chrono::duration<double>(now - start).count();
    if (std::chrono::duration<double>(now - last_progress).count() >= 2.0) {
      last_progress = now;
      log::info("data prepare: {:.1f} of {:.1f} MB ({:.0f}%), {:.2f} MB/s, {:.3f} M tokens/s, {} documents, {} tokens",
                bytes_done / 1e6, summary.input_bytes / 1e6,
                summary.input_bytes > 0 ? 100.0 * bytes_done / summary.input_bytes : 100.0, bytes_done / 1e6 / seconds,
                summary.tokens / 1e6 / seconds, summary.documents, summary.tokens);
    }
  }
  if (rank == 0) summary.outputs = writer->finish();
  summary.blank_lines = scanner.blank_lines();
  summary.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  MPI_Barrier(comm);  // the files are in place before any rank returns
  return summary;
}

}  // namespace trident
