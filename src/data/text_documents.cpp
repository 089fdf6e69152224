#include "data/text_documents.hpp"

#include <nlohmann/json.hpp>

#include <cstring>

#include "core/error.hpp"
#include "core/strings.hpp"

namespace trident {
namespace {

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r\f\v") == std::string_view::npos;
}

}  // namespace

DocumentScanner::DocumentScanner(const std::vector<std::string>& paths, TextInputFormat format) {
  for (const std::string& path : paths) {
    files_.emplace_back(path);
    jsonl_.push_back(format == TextInputFormat::jsonl || (format == TextInputFormat::automatic && ends_with(path, ".jsonl")));
    total_bytes_ += files_.back().size();
  }
}

bool DocumentScanner::next_batch(int64_t max_bytes, std::vector<RawDocument>& batch) {
  batch.clear();
  int64_t bytes = 0;
  while (file_ < static_cast<int>(files_.size()) && (batch.empty() || bytes < max_bytes)) {
    const MappedFile& f = files_[file_];
    const char* data = reinterpret_cast<const char*>(f.data());
    if (!jsonl_[file_]) {
      batch.push_back({file_, 0, 0, std::string_view(data, static_cast<size_t>(f.size()))});
      bytes += f.size();
      ++file_;
      continue;
    }
    if (offset_ >= f.size()) {
      ++file_;
      offset_ = line_ = 0;
      continue;
    }
    const void* newline = std::memchr(data + offset_, '\n', static_cast<size_t>(f.size() - offset_));
    const int64_t end = newline ? static_cast<const char*>(newline) - data : f.size();
    const std::string_view line(data + offset_, static_cast<size_t>(end - offset_));
    ++line_;
    if (is_blank(line)) {
      ++blank_lines_;
    } else {
      batch.push_back({file_, line_, offset_, line});
      bytes += end - offset_ + 1;
    }
    offset_ = end + 1;
  }
  return !batch.empty();
}

std::string_view document_text(const DocumentScanner& scanner, const RawDocument& doc, const std::string& json_key,
                               std::string& storage) {
  if (doc.line == 0) return doc.bytes;
  const auto where = [&] { return fmt::format("{}:{}", scanner.path(doc.file), doc.line); };
  nlohmann::json object;
  try {
    object = nlohmann::json::parse(doc.bytes.begin(), doc.bytes.end());
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(fmt::format("{}: not a JSON line: {}", where(), e.what()));
  }
  if (!object.is_object()) throw Error(fmt::format("{}: a JSONL line must be an object, not {}", where(), object.type_name()));
  const auto text = object.find(json_key);
  if (text == object.end()) throw Error(fmt::format("{}: no key \"{}\" (--json-key names the text field)", where(), json_key));
  if (!text->is_string())
    throw Error(fmt::format("{}: \"{}\" is {}, not a string", where(), json_key, text->type_name()));
  storage = text->get<std::string>();
  return storage;
}

}  // namespace trident
