// The token stream formats: text (bytes), llm.c shards, Megatron indexed datasets. See dataset.hpp.
#include <glob.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/error.hpp"
#include "core/strings.hpp"
#include "data/dataset.hpp"
#include "data/mapped_file.hpp"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the dataset readers assume a little-endian host (as the file formats are)");

namespace trident {
namespace {

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Converts n tokens of type T at src to int32; returns the index of the first id outside
// [0, vocab), or -1 when all are valid.
template <typename T>
int64_t convert_tokens(const uint8_t* src, int64_t n, int64_t vocab, int32_t* out) {
  for (int64_t k = 0; k < n; ++k) {
    const int64_t id = static_cast<int64_t>(load<T>(src + k * static_cast<int64_t>(sizeof(T))));
    if (id < 0 || id >= vocab) return k;
    out[k] = static_cast<int32_t>(id);
  }
  return -1;
}

[[noreturn]] void bad_token(const std::string& file, int64_t id, int64_t file_token, int64_t byte_offset,
                            int64_t stream_token, int64_t vocab) {
  throw Error(fmt::format(
      "data file '{}': token id {} at token offset {} (byte offset {}; token {} of the stream) is "
      "outside [0, model.vocab_size = {}): the data was tokenized for another vocabulary or is corrupt",
      file, id, file_token, byte_offset, stream_token, vocab));
}

void check_range(const TokenStream& s, int64_t begin, int64_t count) {
  if (begin < 0 || count < 0 || begin > s.size() || count > s.size() - begin) {
    throw Error(fmt::format("token read [{}, {}) is outside the stream {} ({} tokens)", begin, begin + count,
                            s.describe(), s.size()));
  }
}

bool has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

// ------------------------------------------------------------------------------------------------
// text: every byte is a token.

class TextStream final : public TokenStream {
 public:
  TextStream(const std::string& path, int64_t vocab) : file_(path) {
    if (vocab < 256) {
      throw Error(fmt::format(
          "text data '{}' uses byte-level tokens (ids 0..255) but model.vocab_size is {}; set "
          "model.vocab_size >= 256",
          path, vocab));
    }
  }
  int64_t size() const override { return file_.size(); }
  void read(int64_t begin, int64_t count, int32_t* out) const override {
    check_range(*this, begin, count);
    const uint8_t* src = file_.data() + begin;
    for (int64_t k = 0; k < count; ++k) out[k] = src[k];
  }
  std::string describe() const override {
    return fmt::format("text '{}' ({} byte tokens)", file_.path(), file_.size());
  }

 private:
  MappedFile file_;
};

// ------------------------------------------------------------------------------------------------
// llm.c shards.

constexpr int64_t kLlmcHeaderBytes = 256 * 4;

std::vector<std::string> expand_glob(const std::string& pattern) {
  if (!has_glob_chars(pattern)) return {pattern};  // a plain path: opening it reports what is wrong
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  ::globfree(&g);
  if (rc == GLOB_NOMATCH || (rc == 0 && out.empty())) {
    throw Error(fmt::format("llm.c data path '{}' matches no file (a glob(3) pattern; the matching shards "
                            "are sorted by name and concatenated)",
                            pattern));
  }
  if (rc != 0) {
    throw Error(fmt::format("llm.c data path '{}': glob(3) failed ({})", pattern,
                            rc == GLOB_NOSPACE ? "out of memory" : "read error"));
  }
  std::sort(out.begin(), out.end());  // bytewise, independent of the locale
  return out;
}

class LlmcStream final : public TokenStream {
 public:
  LlmcStream(const std::string& pattern, int64_t vocab) : pattern_(pattern), vocab_(vocab) {
    for (const std::string& path : expand_glob(pattern)) {
      MappedFile f(path);
      const int64_t n = check_header(f);
      starts_.push_back(total_);
      counts_.push_back(n);
      total_ += n;
      files_.push_back(std::move(f));
    }
  }

  int64_t size() const override { return total_; }

  void read(int64_t begin, int64_t count, int32_t* out) const override {
    check_range(*this, begin, count);
    if (count == 0) return;
    size_t s = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), begin) - starts_.begin()) - 1;
    while (count > 0) {
      const int64_t local = begin - starts_[s];
      const int64_t n = std::min(count, counts_[s] - local);
      if (n > 0) {
        const int64_t byte0 = kLlmcHeaderBytes + 2 * local;
        const int64_t bad = convert_tokens<uint16_t>(files_[s].data() + byte0, n, vocab_, out);
        if (bad >= 0) {
          bad_token(files_[s].path(), load<uint16_t>(files_[s].data() + byte0 + 2 * bad), local + bad,
                    byte0 + 2 * bad, begin + bad, vocab_);
        }
        begin += n;
        count -= n;
        out += n;
      }
      ++s;
    }
  }

  std::string describe() const override {
    return fmt::format("llm.c shards '{}' ({} file{}, {} tokens)", pattern_, files_.size(),
                       files_.size() == 1 ? "" : "s", total_);
  }

 private:
  static int64_t check_header(const MappedFile& f) {
    const std::string& p = f.path();
    if (f.size() < kLlmcHeaderBytes) {
      throw Error(fmt::format("llm.c shard '{}' is truncated: it has {} bytes but the header alone is {} "
                              "bytes (256 int32)",
                              p, f.size(), kLlmcHeaderBytes));
    }
    const int32_t magic = load<int32_t>(f.data());
    if (magic != kLlmcMagic) {
      throw Error(fmt::format("llm.c shard '{}': wrong magic {} at byte offset 0 (expected {}; is it an "
                              "llm.c token file?)",
                              p, magic, kLlmcMagic));
    }
    const int32_t version = load<int32_t>(f.data() + 4);
    if (version != 1) {
      throw Error(fmt::format("llm.c shard '{}': unsupported version {} at byte offset 4 (allowed: 1, "
                              "uint16 tokens)",
                              p, version));
    }
    const int64_t n = load<int32_t>(f.data() + 8);
    if (n < 0) throw Error(fmt::format("llm.c shard '{}': negative token count {} at byte offset 8", p, n));
    const int64_t expected = kLlmcHeaderBytes + 2 * n;
    if (f.size() < expected) {
      throw Error(fmt::format("llm.c shard '{}' is truncated: the header (byte offset 8) declares {} tokens, "
                              "{} bytes with the header, but the file has {} bytes (room for {} tokens)",
                              p, n, expected, f.size(), (f.size() - kLlmcHeaderBytes) / 2));
    }
    if (f.size() > expected) {
      throw Error(fmt::format("llm.c shard '{}' is corrupt: {} unexpected bytes after the {} tokens the "
                              "header (byte offset 8) declares; the file should have exactly {} bytes",
                              p, f.size() - expected, n, expected));
    }
    return n;
  }

  std::string pattern_;
  int64_t vocab_;
  std::vector<MappedFile> files_;
  std::vector<int64_t> starts_;  // stream offset of each shard's first token
  std::vector<int64_t> counts_;
  int64_t total_ = 0;
};

// ------------------------------------------------------------------------------------------------
// Megatron-LM indexed dataset.

constexpr char kMegatronMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr int64_t kMegatronHeaderBytes = 9 + 8 + 1 + 8 + 8;

const char* megatron_dtype_name(int code) {
  switch (code) {
    case 1: return "uint8";
    case 2: return "int8";
    case 3: return "int16";
    case 4: return "int32";
    case 5: return "int64";
    case 6: return "float64";
    case 7: return "float32";
    case 8: return "uint16";
    default: return "unknown";
  }
}

int megatron_item_size(int code) {
  switch (code) {
    case 1: case 2: return 1;
    case 3: case 8: return 2;
    case 4: return 4;
    case 5: return 8;
    default: return 0;
  }
}

int64_t megatron_load_id(const uint8_t* p, int code) {
  switch (code) {
    case 1: return load<uint8_t>(p);
    case 2: return load<int8_t>(p);
    case 3: return load<int16_t>(p);
    case 4: return load<int32_t>(p);
    case 5: return load<int64_t>(p);
    case 8: return load<uint16_t>(p);
    default: return -1;
  }
}

int64_t megatron_convert(int code, const uint8_t* src, int64_t n, int64_t vocab, int32_t* out) {
  switch (code) {
    case 1: return convert_tokens<uint8_t>(src, n, vocab, out);
    case 2: return convert_tokens<int8_t>(src, n, vocab, out);
    case 3: return convert_tokens<int16_t>(src, n, vocab, out);
    case 4: return convert_tokens<int32_t>(src, n, vocab, out);
    case 5: return convert_tokens<int64_t>(src, n, vocab, out);
    case 8: return convert_tokens<uint16_t>(src, n, vocab, out);
    default: return 0;
  }
}

class MegatronStream final : public TokenStream {
 public:
  MegatronStream(const std::string& path, int64_t vocab)
      : prefix_(ends_with(path, ".bin") || ends_with(path, ".idx") ? path.substr(0, path.size() - 4) : path),
        vocab_(vocab), idx_(prefix_ + ".idx"), bin_(prefix_ + ".bin") {
    parse_index();
  }

  int64_t size() const override { return total_; }

  void read(int64_t begin, int64_t count, int32_t* out) const override {
    check_range(*this, begin, count);
    if (count == 0) return;
    if (contiguous_) {
      read_bytes(base_ + begin * item_, begin, count, out);
      return;
    }
    // Sequences scattered in the .bin: walk them.
    size_t s = static_cast<size_t>(std::upper_bound(prefix_tokens_.begin(), prefix_tokens_.end(), begin) -
                                   prefix_tokens_.begin()) - 1;
    while (count > 0) {
      const int64_t local = begin - prefix_tokens_[s];
      const int64_t n = std::min(count, prefix_tokens_[s + 1] - prefix_tokens_[s] - local);
      if (n > 0) {
        read_bytes(pointer(static_cast<int64_t>(s)) + local * item_, begin, n, out);
        begin += n;
        count -= n;
        out += n;
      }
      ++s;
    }
  }

  std::string describe() const override {
    return fmt::format("megatron '{}' (.bin/.idx; {} sequences, {} documents, {}, {} tokens)", prefix_,
                       sequences_, documents_, megatron_dtype_name(code_), total_);
  }

 private:
  int64_t pointer(int64_t s) const { return load<int64_t>(idx_.data() + pointers_at_ + 8 * s); }

  void read_bytes(int64_t byte0, int64_t stream0, int64_t n, int32_t* out) const {
    const int64_t bad = megatron_convert(code_, bin_.data() + byte0, n, vocab_, out);
    if (bad >= 0) {
      const int64_t byte = byte0 + bad * item_;
      bad_token(bin_.path(), megatron_load_id(bin_.data() + byte, code_), byte / item_, byte, stream0 + bad,
                vocab_);
    }
  }

  [[noreturn]] void corrupt(const std::string& what) const {
    throw Error(fmt::format("megatron index '{}': {}", idx_.path(), what));
  }

  void parse_index() {
    const uint8_t* d = idx_.data();
    const int64_t size = idx_.size();
    if (size < kMegatronHeaderBytes) {
      corrupt(fmt::format("truncated: {} bytes, but the header alone is {} bytes", size, kMegatronHeaderBytes));
    }
    if (std::memcmp(d, kMegatronMagic, 9) != 0) {
      std::string found;
      for (int i = 0; i < 9; ++i) found += fmt::format("{:02x}", d[i]);
      corrupt(fmt::format("wrong magic at byte offset 0 (expected \"MMIDIDX\\x00\\x00\", found bytes {}); is it "
                          "a Megatron-LM mmap indexed dataset?",
                          found));
    }
    const uint64_t version = load<uint64_t>(d + 9);
    if (version != 1) corrupt(fmt::format("unsupported version {} at byte offset 9 (allowed: 1)", version));
    code_ = load<uint8_t>(d + 17);
    item_ = megatron_item_size(code_);
    if (item_ == 0) {
      corrupt(fmt::format("token dtype code {} ({}) at byte offset 17 is not supported; allowed integer dtypes: "
                          "1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16",
                          code_, megatron_dtype_name(code_)));
    }
    const uint64_t seqs = load<uint64_t>(d + 18);
    const uint64_t docs = load<uint64_t>(d + 26);
    const uint64_t room = static_cast<uint64_t>(size - kMegatronHeaderBytes);
    // 12 bytes per sequence (int32 size + int64 pointer) and 8 per document index.
    if (seqs > room / 12 || docs > room / 8 || seqs * 12 + docs * 8 > room) {
      const bool small = seqs <= room / 12 && docs <= room / 8;
      corrupt(fmt::format("truncated: the header declares {} sequences (byte offset 18) and {} document indices "
                          "(byte offset 26), {} bytes in all, but the file has {} bytes",
                          seqs, docs,
                          small ? fmt::format("{}", static_cast<uint64_t>(kMegatronHeaderBytes) + 12 * seqs + 8 * docs)
                                : std::string("more than that"),
                          size));
    }
    sequences_ = static_cast<int64_t>(seqs);
    const int64_t ndoc_idx = static_cast<int64_t>(docs);
    const int64_t needed = kMegatronHeaderBytes + 12 * sequences_ + 8 * ndoc_idx;
    if (size != needed && size != needed + sequences_) {  // + int8 modes[S] in multimodal datasets
      corrupt(fmt::format("{} unexpected bytes after the document indices (the header declares {} sequences and "
                          "{} document indices: {} bytes)",
                          size - needed, sequences_, ndoc_idx, needed));
    }
    const int64_t sizes_at = kMegatronHeaderBytes;
    pointers_at_ = sizes_at + 4 * sequences_;
    const int64_t docs_at = pointers_at_ + 8 * sequences_;

    // Document indices: sequence ranges [doc[k], doc[k+1]) rising from 0 to S.
    if (ndoc_idx < 1) corrupt("the document index array is empty (it must run from 0 to the sequence count)");
    for (int64_t k = 0; k < ndoc_idx; ++k) {
      const int64_t v = load<int64_t>(d + docs_at + 8 * k);
      const int64_t prev = k == 0 ? 0 : load<int64_t>(d + docs_at + 8 * (k - 1));
      const bool ok = (k == 0 ? v == 0 : v >= prev) && v <= sequences_ && (k + 1 < ndoc_idx || v == sequences_);
      if (!ok) {
        corrupt(fmt::format("document index {} at byte offset {} is {}: document indices must rise from 0 to "
                            "the sequence count {}",
                            k, docs_at + 8 * k, v, sequences_));
      }
    }
    documents_ = ndoc_idx - 1;

    // Sizes and pointers; the .bin must hold every sequence.
    contiguous_ = true;
    base_ = sequences_ > 0 ? pointer(0) : 0;
    int64_t acc = 0;
    std::vector<int64_t> prefix;
    prefix.reserve(static_cast<size_t>(sequences_) + 1);
    prefix.push_back(0);
    for (int64_t s = 0; s < sequences_; ++s) {
      const int64_t n = load<int32_t>(d + sizes_at + 4 * s);
      if (n < 0) corrupt(fmt::format("sequence {} has negative size {} (byte offset {})", s, n, sizes_at + 4 * s));
      const int64_t p = pointer(s);
      if (p < 0 || p > bin_.size() || n * item_ > bin_.size() - p) {
        throw Error(fmt::format(
            "megatron data '{}' is shorter than its index '{}' says: sequence {} (pointer at byte offset {} of the "
            "index) spans bytes [{}, {}) but the .bin has {} bytes",
            bin_.path(), idx_.path(), s, pointers_at_ + 8 * s, p, p + n * item_, bin_.size()));
      }
      if (p != base_ + acc * item_) contiguous_ = false;
      acc += n;
      prefix.push_back(acc);
    }
    total_ = acc;
    if (!contiguous_) prefix_tokens_ = std::move(prefix);
  }

  std::string prefix_;
  int64_t vocab_;
  MappedFile idx_;
  MappedFile bin_;
  int code_ = 0;
  int64_t item_ = 0;
  int64_t sequences_ = 0;
  int64_t documents_ = 0;
  int64_t pointers_at_ = 0;
  bool contiguous_ = true;  // sequences back to back from base_ (as Megatron writes them)
  int64_t base_ = 0;
  std::vector<int64_t> prefix_tokens_;  // only when not contiguous: stream offset of each sequence
  int64_t total_ = 0;
};

}  // namespace

std::unique_ptr<TokenStream> open_token_stream(DataFormat format, const std::string& path, int64_t vocab_size) {
  const char* name = format == DataFormat::Text ? "text" : format == DataFormat::LlmC ? "llmc" : "megatron";
  if (path.empty()) throw Error(fmt::format("data path is empty (data format \"{}\")", name));
  if (vocab_size <= 0) throw Error(fmt::format("model.vocab_size must be positive, got {}", vocab_size));
  try {
    switch (format) {
      case DataFormat::Text: return std::make_unique<TextStream>(path, vocab_size);
      case DataFormat::LlmC: return std::make_unique<LlmcStream>(path, vocab_size);
      case DataFormat::Megatron: return std::make_unique<MegatronStream>(path, vocab_size);
    }
  } catch (const Error& e) {
    throw Error(fmt::format("{} [data format \"{}\", path '{}']", e.what(), name, path));
  }
  throw Error(fmt::format("unknown data format {}", static_cast<int>(format)));
}

}  // namespace trident
