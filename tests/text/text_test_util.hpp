#pragma once
// Helpers of the tokenizer and data-prepare tests: the test corpus (tools/make_corpus.sh) and the
// reference token ids from OpenAI's tiktoken (tools/tiktoken_gpt2.cjs, under node). tiktoken is
// installed by scripts/install-deps.sh (`make test-deps`) into TRIDENT_NPM_DIR; without it (or without
// node) these helpers fail the test with what to install: never a skip.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/test_support.hpp"

namespace trident::texttest {

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Writes the corpus into `dir`; returns its path (empty after a failure, which it reports).
inline std::string make_corpus(const std::string& dir) {
  const std::string path = dir + "/corpus.txt";
  std::string output;
  const int rc = test::run_command(std::string(TRIDENT_TEXT_TOOLS) + "/make_corpus.sh " + path, &output);
  if (rc != 0) {
    ADD_FAILURE() << "tests/text/tools/make_corpus.sh failed (exit " << rc << "): " << output;
    return "";
  }
  return path;
}

// tiktoken's gpt2 ids of `input` (mode "encode": a text file; "documents": JSONL, llm.c's layout).
// Empty after a failure, which it reports (e.g. tiktoken not installed).
inline std::vector<uint32_t> tiktoken_ids(const std::string& mode, const std::string& input) {
  const std::string out = input + "." + mode + ".tiktoken";
  std::string output;
  const int rc = test::run_command("node " + std::string(TRIDENT_TEXT_TOOLS) + "/tiktoken_gpt2.cjs " +
                                       TRIDENT_NPM_DIR + " " + mode + " " + input + " " + out,
                                   &output);
  if (rc != 0) {
    ADD_FAILURE() << "tiktoken (the reference tokenizer) did not run (exit " << rc << "): " << output
                  << "\ninstall it: TRIDENT_WITH_TEXT_TESTS=1 scripts/install-deps.sh (part of `make test-deps`)";
    return {};
  }
  const std::string bytes = read_file(out);
  std::vector<uint32_t> ids(bytes.size() / 4);
  std::memcpy(ids.data(), bytes.data(), ids.size() * 4);
  return ids;
}

}  // namespace trident::texttest
