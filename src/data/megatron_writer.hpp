#pragma once
// Writes a Megatron-LM indexed dataset (the format in data/dataset.hpp): PREFIX.bin, the tokens of
// every document in order, and PREFIX.idx, one sequence per document. The .bin is streamed to disk
// beside its name; both files are renamed into place by finish(), the .bin first.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace trident {

class AtomicFile;

class MegatronWriter {
 public:
  // vocab_size picks the token type: uint16 (dtype 8) up to 65536 tokens, int32 (dtype 4) above.
  MegatronWriter(std::string prefix, int64_t vocab_size);
  ~MegatronWriter();

  // Appends one document (one sequence) of `count` tokens.
  void add_document(const uint32_t* tokens, size_t count);
  // Writes the index and puts both files in place; returns their paths (.bin, .idx).
  std::vector<std::string> finish();

 private:
  std::string prefix_;
  bool narrow_;  // uint16 tokens
  std::unique_ptr<AtomicFile> bin_;
  std::vector<int32_t> sizes_;
  std::vector<int64_t> pointers_;
  int64_t bytes_ = 0;
  std::vector<uint16_t> narrow_buffer_;
};

}  // namespace trident
