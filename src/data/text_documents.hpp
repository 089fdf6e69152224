#pragma once
// The documents of `trident data prepare`'s input files, in order:
//   text   each file is one document (its whole content)
//   jsonl  each line is a JSON object, one document; its text is the string under the JSON key
//          ("text" by default, Megatron's convention). Blank lines are not documents (counted).
// Files are memory-mapped; every MPI rank scans them alike, so each sees the same documents in the
// same order and can take its share of a batch without asking the others.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/mapped_file.hpp"

namespace trident {

enum class TextInputFormat { automatic, text, jsonl };  // automatic: jsonl for *.jsonl, text otherwise

struct RawDocument {
  int file = 0;             // index in the input list
  int64_t line = 0;         // 1-based line of a JSONL document; 0 for a text file
  int64_t offset = 0;       // byte offset of the document (its line) in the file
  std::string_view bytes;   // the file, or the JSON line without its newline
};

class DocumentScanner {
 public:
  // Maps every input; throws trident::Error naming a file that is missing, unreadable or not a regular file.
  DocumentScanner(const std::vector<std::string>& paths, TextInputFormat format);

  // Replaces `batch` with the next documents: whole ones, about max_bytes in all (at least one while
  // any is left). False when the inputs are exhausted.
  bool next_batch(int64_t max_bytes, std::vector<RawDocument>& batch);

  int64_t total_bytes() const { return total_bytes_; }
  int64_t blank_lines() const { return blank_lines_; }
  const std::string& path(int file) const { return files_[file].path(); }
  bool is_jsonl(int file) const { return jsonl_[file]; }

 private:
  std::vector<MappedFile> files_;
  std::vector<bool> jsonl_;
  int64_t total_bytes_ = 0, blank_lines_ = 0;
  // Where the scan stands: file, byte offset and line in it.
  int file_ = 0;
  int64_t offset_ = 0, line_ = 0;
};

// The text of a document: the file's bytes, or the JSON line's string under `json_key`. `storage`
// holds a parsed string. Throws trident::Error "FILE:LINE: ..." for a line that is not a JSON object
// with a string under the key (JSON must be UTF-8: ill-formed UTF-8 in a line is such an error).
std::string_view document_text(const DocumentScanner& scanner, const RawDocument& doc, const std::string& json_key,
                               std::string& storage);

}  // namespace trident
