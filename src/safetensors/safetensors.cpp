#include "safetensors/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/bf16.hpp"
#include "core/error.hpp"
#include "data/mapped_file.hpp"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

namespace trident {
namespace {

// The reference implementation refuses headers above 100 MB.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

int dtype_size(const std::string& dtype) {
  static const std::map<std::string, int> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2},  {"U16", 2}, {"F16", 2},
      {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"F64", 8},     {"I64", 8},  {"U64", 8}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

std::string shape_str(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: mant * 2^-24
      float f = std::ldexp(static_cast<float>(mant), -24);
      std::memcpy(&bits, &f, 4);
      bits |= sign;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

struct Entry {
  std::string dtype;
  std::vector<int64_t> shape;
  int64_t numel = 1;
  int64_t begin = 0;
  int64_t end = 0;
};

}  // namespace

struct SafetensorsReader::Impl {
  MappedFile file;
  int64_t data_at = 0;    // file offset of the data section
  int64_t data_size = 0;
  std::map<std::string, Entry> tensors;
  std::map<std::string, std::string> meta;

  explicit Impl(const std::string& path) : file(path) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(fmt::format("safetensors file '{}': {}", file.path(), what));
  }

  // Elements [begin, begin + n) of tensor `name`, converted to float.
  void convert(const std::string& name, int64_t begin, int64_t n, float* out) const {
    const Entry& e = entry(name);
    if (n == 0) return;
    const int64_t item = dtype_size(e.dtype);
    const uint8_t* src = file.data() + data_at + e.begin + begin * item;
    if (e.dtype == "F32") {
      std::memcpy(out, src, static_cast<size_t>(n) * 4);
    } else if (e.dtype == "F16") {
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = half_to_float(h);
      }
    } else if (e.dtype == "BF16") {
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = bf16_value(h);
      }
    } else if (e.dtype == "F64") {
      for (int64_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, src + 8 * i, 8);
        out[i] = static_cast<float>(v);
      }
    } else {
      fail(fmt::format("tensor '{}' has dtype {}; read_f32 accepts F32, F16, BF16 and F64", name, e.dtype));
    }
  }

  const Entry& entry(const std::string& name) const {
    auto it = tensors.find(name);
    if (it == tensors.end()) {
      fail(fmt::format("no tensor named '{}' (the file has {} tensors)", name, tensors.size()));
    }
    return it->second;
  }

  void parse() {
    const int64_t size = file.size();
    if (size < 8) fail(fmt::format("truncated: {} bytes, fewer than the 8-byte header length", size));
    uint64_t n;
    std::memcpy(&n, file.data(), 8);
    if (n > static_cast<uint64_t>(size - 8)) {
      fail(fmt::format("the header length {} (bytes 0..8) exceeds the {} bytes that follow it", n, size - 8));
    }
    if (n > kMaxHeaderBytes) fail(fmt::format("the header length {} exceeds the limit of {} bytes", n, kMaxHeaderBytes));
    data_at = 8 + static_cast<int64_t>(n);
    data_size = size - data_at;

    nlohmann::json header;
    try {
      header = nlohmann::json::parse(file.data() + 8, file.data() + 8 + n);
    } catch (const nlohmann::json::exception& e) {
      fail(fmt::format("the header (bytes 8..{}) is not valid JSON: {}", 8 + n, e.what()));
    }
    if (!header.is_object()) fail("the header is not a JSON object");

    std::vector<std::pair<const Entry*, const std::string*>> by_offset;
    for (auto it = header.begin(); it != header.end(); ++it) {
      const std::string& name = it.key();
      const nlohmann::json& v = it.value();
      if (name == "__metadata__") {
        if (!v.is_object()) fail("\"__metadata__\" is not a JSON object of strings");
        for (auto m = v.begin(); m != v.end(); ++m) {
          if (!m.value().is_string()) fail(fmt::format("metadata value of '{}' is not a string", m.key()));
          meta[m.key()] = m.value().get<std::string>();
        }
        continue;
      }
      auto bad = [&](const std::string& what) { fail(fmt::format("tensor '{}': {}", name, what)); };
      if (!v.is_object()) bad("its header entry is not a JSON object");
      Entry e;
      auto d = v.find("dtype");
      if (d == v.end() || !d->is_string()) bad("missing or non-string \"dtype\"");
      e.dtype = d->get<std::string>();
      const int item = dtype_size(e.dtype);
      if (item == 0) {
        bad(fmt::format("unknown dtype \"{}\" (allowed: BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, "
                        "U32, F32, F64, I64, U64)",
                        e.dtype));
      }
      auto s = v.find("shape");
      if (s == v.end() || !s->is_array()) bad("missing or non-array \"shape\"");
      for (const auto& dim : *s) {
        if (!dim.is_number_integer() || dim.get<int64_t>() < 0) bad(fmt::format("bad shape {}", s->dump()));
        const int64_t x = dim.get<int64_t>();
        if (x > 0 && e.numel > std::numeric_limits<int64_t>::max() / 8 / x) bad(fmt::format("shape {} is too large", s->dump()));
        e.shape.push_back(x);
        e.numel *= x;
      }
      auto o = v.find("data_offsets");
      if (o == v.end() || !o->is_array() || o->size() != 2 || !(*o)[0].is_number_integer() ||
          !(*o)[1].is_number_integer() || (*o)[0].get<int64_t>() < 0 || (*o)[1].get<int64_t>() < 0) {
        bad("missing or malformed \"data_offsets\" (two non-negative integers expected)");
      }
      e.begin = (*o)[0].get<int64_t>();
      e.end = (*o)[1].get<int64_t>();
      if (e.begin > e.end || e.end > data_size) {
        bad(fmt::format("data_offsets [{}, {}] lie outside the data section of {} bytes", e.begin, e.end, data_size));
      }
      if (e.end - e.begin != e.numel * item) {
        bad(fmt::format("data_offsets [{}, {}] span {} bytes, but dtype {} x shape {} needs {}", e.begin, e.end,
                        e.end - e.begin, e.dtype, shape_str(e.shape), e.numel * item));
      }
      auto ins = tensors.emplace(name, std::move(e));
      by_offset.emplace_back(&ins.first->second, &ins.first->first);
    }
    std::sort(by_offset.begin(), by_offset.end(),
              [](const auto& a, const auto& b) { return a.first->begin < b.first->begin; });
    const std::pair<const Entry*, const std::string*>* prev = nullptr;
    for (const auto& cur : by_offset) {
      if (cur.first->begin == cur.first->end) continue;  // empty tensors occupy no bytes
      if (prev && cur.first->begin < prev->first->end) {
        fail(fmt::format("tensors '{}' [{}, {}] and '{}' [{}, {}] overlap", *prev->second, prev->first->begin,
                         prev->first->end, *cur.second, cur.first->begin, cur.first->end));
      }
      prev = &cur;
    }
  }
};

SafetensorsReader::SafetensorsReader(const std::string& path) : impl_(std::make_unique<Impl>(path)) {
  impl_->parse();
}
SafetensorsReader::~SafetensorsReader() = default;
SafetensorsReader::SafetensorsReader(SafetensorsReader&&) noexcept = default;
SafetensorsReader& SafetensorsReader::operator=(SafetensorsReader&&) noexcept = default;

const std::string& SafetensorsReader::path() const { return impl_->file.path(); }
bool SafetensorsReader::has(const std::string& name) const { return impl_->tensors.count(name) > 0; }

std::vector<std::string> SafetensorsReader::names() const {
  std::vector<std::string> out;
  out.reserve(impl_->tensors.size());
  for (const auto& kv : impl_->tensors) out.push_back(kv.first);
  return out;
}

std::vector<int64_t> SafetensorsReader::shape(const std::string& name) const { return impl_->entry(name).shape; }
std::string SafetensorsReader::dtype(const std::string& name) const { return impl_->entry(name).dtype; }
int64_t SafetensorsReader::numel(const std::string& name) const { return impl_->entry(name).numel; }

void SafetensorsReader::read_f32(const std::string& name, float* out, const std::vector<int64_t>& expected_shape) const {
  const Entry& e = impl_->entry(name);
  if (e.shape != expected_shape) {
    impl_->fail(fmt::format("tensor '{}' has shape {}, expected {}", name, shape_str(e.shape), shape_str(expected_shape)));
  }
  impl_->convert(name, 0, e.numel, out);
}

void SafetensorsReader::read_f32_range(const std::string& name, int64_t begin, int64_t count, float* out) const {
  const Entry& e = impl_->entry(name);
  if (begin < 0 || count < 0 || begin + count > e.numel)
    impl_->fail(fmt::format("tensor '{}': elements [{}, {}) outside its {}", name, begin, begin + count, e.numel));
  impl_->convert(name, begin, count, out);
}

void SafetensorsReader::release(const std::string& name) const {
  const Entry& e = impl_->entry(name);
  impl_->file.release(impl_->data_at + e.begin, e.end - e.begin);
}

std::vector<float> SafetensorsReader::read_f32(const std::string& name, const std::vector<int64_t>& expected_shape) const {
  std::vector<float> out(static_cast<size_t>(numel(name)));
  read_f32(name, out.data(), expected_shape);
  return out;
}

const std::map<std::string, std::string>& SafetensorsReader::metadata() const { return impl_->meta; }
bool SafetensorsReader::has_metadata(const std::string& key) const { return impl_->meta.count(key) > 0; }
std::string SafetensorsReader::metadata(const std::string& key) const {
  auto it = impl_->meta.find(key);
  if (it == impl_->meta.end()) impl_->fail(fmt::format("no metadata key '{}'", key));
  return it->second;
}

// ------------------------------------------------------------------------------------------------
// Writer.

namespace {

class TempFile {
 public:
  explicit TempFile(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) sys_fail("cannot create");
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }
  void write_all(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, std::min<size_t>(n, size_t{1} << 30));
      if (w < 0) {
        if (errno == EINTR) continue;
        sys_fail("cannot write");
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
  }
  void commit(const std::string& final_path) {
    if (::fsync(fd_) != 0) sys_fail("cannot fsync");
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) sys_fail("cannot close");
    if (::rename(path_.c_str(), final_path.c_str()) != 0) {
      const int err = errno;
      throw Error(fmt::format("cannot rename '{}' to '{}': {}", path_, final_path, std::strerror(err)));
    }
    committed_ = true;
    // Make the rename durable.
    const auto slash = final_path.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : final_path.substr(0, slash);
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }

 private:
  [[noreturn]] void sys_fail(const char* what) {
    const int err = errno;
    throw Error(fmt::format("{} '{}': {}", what, path_, std::strerror(err)));
  }
  std::string path_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsStream> streams;
  streams.reserve(tensors.size());
  for (const auto& t : tensors) {
    int64_t numel = 1;
    for (int64_t d : t.shape)  // bad shapes (negative, too large) are reported by the writer below
      numel = d > 0 && numel <= std::numeric_limits<int64_t>::max() / 8 / d ? numel * d : 0;
    if (numel > 0 && t.data == nullptr)
      throw Error(fmt::format("cannot write safetensors file '{}': tensor '{}': null data", path, t.name));
    const float* data = t.data;
    streams.push_back({t.name, t.shape, [data, numel] { return std::vector<float>(data, data + numel); }});
  }
  write_safetensors_streamed(path, streams, metadata);
}

void write_safetensors_streamed(const std::string& path, const std::vector<SafetensorsStream>& tensors,
                                const std::map<std::string, std::string>& metadata, SafetensorsDtype dtype) {
  const int64_t item = dtype == SafetensorsDtype::BF16 ? 2 : 4;
  std::vector<const SafetensorsStream*> order;
  order.reserve(tensors.size());
  for (const auto& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) { return a->name < b->name; });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& kv : metadata) m[kv.first] = kv.second;
    header["__metadata__"] = std::move(m);
  }
  std::vector<int64_t> bytes;
  int64_t offset = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const SafetensorsStream& t = *order[i];
    auto bad = [&](const std::string& what) {
      throw Error(fmt::format("cannot write safetensors file '{}': tensor '{}': {}", path, t.name, what));
    };
    if (t.name.empty() || t.name == "__metadata__") bad("reserved or empty tensor name");
    if (i > 0 && order[i - 1]->name == t.name) bad("the name appears twice");
    int64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) bad(fmt::format("negative dimension in shape {}", shape_str(t.shape)));
      if (d > 0 && numel > std::numeric_limits<int64_t>::max() / 8 / d) bad("shape too large");
      numel *= d;
    }
    if (numel > 0 && !t.produce) bad("no data");
    nlohmann::ordered_json e = nlohmann::ordered_json::object();
    e["dtype"] = dtype == SafetensorsDtype::BF16 ? "BF16" : "F32";
    e["shape"] = t.shape;
    e["data_offsets"] = {offset, offset + item * numel};
    header[t.name] = std::move(e);
    bytes.push_back(item * numel);
    offset += item * numel;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("cannot write safetensors file '{}': {}", path, e.what()));
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t n = text.size();

  TempFile tmp(fmt::format("{}.tmp.{}", path, static_cast<long>(::getpid())));
  tmp.write_all(&n, 8);
  tmp.write_all(text.data(), text.size());
  for (size_t i = 0; i < order.size(); ++i) {
    if (bytes[i] == 0) continue;
    const std::vector<float> data = order[i]->produce();
    if (int64_t(data.size()) * item != bytes[i])
      throw Error(fmt::format("cannot write safetensors file '{}': tensor '{}': {} values produced, its shape {} holds {}",
                              path, order[i]->name, data.size(), shape_str(order[i]->shape), bytes[i] / item));
    if (dtype == SafetensorsDtype::BF16) {
      std::vector<uint16_t> bits(data.size());
      for (size_t k = 0; k < data.size(); ++k) bits[k] = bf16_bits(data[k]);
      tmp.write_all(bits.data(), static_cast<size_t>(bytes[i]));
    } else {
      tmp.write_all(data.data(), static_cast<size_t>(bytes[i]));
    }
  }
  tmp.commit(path);
}

}  // namespace trident
