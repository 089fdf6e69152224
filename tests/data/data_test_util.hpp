#pragma once
// Helpers for the data tests: temp dirs, writers of llm.c shards and Megatron .bin/.idx files,
// and catching trident::Error messages.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/test_support.hpp"
#include "core/error.hpp"

namespace trident::datatest {

struct TempDir {
  std::string path;
  TempDir() : path(::trident::test::make_temp_dir("trident-data")) {}
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

template <typename T>
void append_le(std::string& s, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  s.append(b, sizeof(T));
}

// An llm.c shard; `declared` < 0 writes the true token count.
inline std::string llmc_bytes(const std::vector<uint16_t>& tokens, int32_t magic = 20240520, int32_t version = 1,
                              int64_t declared = -1) {
  std::string s;
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = static_cast<int32_t>(declared < 0 ? static_cast<int64_t>(tokens.size()) : declared);
  for (int32_t h : header) append_le(s, h);
  for (uint16_t t : tokens) append_le(s, t);
  return s;
}

inline void append_token(std::string& s, int code, int64_t v) {
  switch (code) {
    case 1: append_le(s, static_cast<uint8_t>(v)); break;
    case 2: append_le(s, static_cast<int8_t>(v)); break;
    case 3: append_le(s, static_cast<int16_t>(v)); break;
    case 4: append_le(s, static_cast<int32_t>(v)); break;
    case 5: append_le(s, static_cast<int64_t>(v)); break;
    case 6: append_le(s, static_cast<double>(v)); break;
    case 7: append_le(s, static_cast<float>(v)); break;
    case 8: append_le(s, static_cast<uint16_t>(v)); break;
    default: throw std::runtime_error("bad dtype code");
  }
}

inline int item_size(int code) {
  switch (code) {
    case 1: case 2: return 1;
    case 3: case 8: return 2;
    case 4: case 7: return 4;
    default: return 8;
  }
}

// The .idx of a Megatron dataset, as Megatron-LM's _IndexWriter writes it.
inline std::string megatron_idx(int code, const std::vector<int32_t>& sizes, const std::vector<int64_t>& pointers,
                                const std::vector<int64_t>& doc_indices, uint64_t version = 1) {
  std::string s("MMIDIDX\0\0", 9);
  append_le<uint64_t>(s, version);
  append_le<uint8_t>(s, static_cast<uint8_t>(code));
  append_le<uint64_t>(s, sizes.size());
  append_le<uint64_t>(s, doc_indices.size());
  for (int32_t v : sizes) append_le(s, v);
  for (int64_t v : pointers) append_le(s, v);
  for (int64_t v : doc_indices) append_le(s, v);
  return s;
}

// Writes prefix.bin / prefix.idx with one sequence per document (as preprocess_data.py does).
inline void write_megatron(const std::string& prefix, const std::vector<std::vector<int64_t>>& docs, int code) {
  std::string bin;
  std::vector<int32_t> sizes;
  std::vector<int64_t> pointers, doc_indices{0};
  for (const auto& d : docs) {
    pointers.push_back(static_cast<int64_t>(bin.size()));
    sizes.push_back(static_cast<int32_t>(d.size()));
    for (int64_t t : d) append_token(bin, code, t);
    doc_indices.push_back(static_cast<int64_t>(sizes.size()));
  }
  write_bytes(prefix + ".bin", bin);
  write_bytes(prefix + ".idx", megatron_idx(code, sizes, pointers, doc_indices));
}

// The message of the trident::Error that f throws ("" and a test failure when it throws none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const ::trident::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected trident::Error, got another exception: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected trident::Error, nothing was thrown";
  return "";
}

}  // namespace trident::datatest
