// GPT-2 tokenizer speed on one core (run.sh compares it with tiktoken on the same corpus):
//   Gpt2Encode/cold   a fresh tokenizer per pass (empty piece cache), as tiktoken, which has none
//   Gpt2Encode/warm   the same tokenizer again and again (every piece cached: a long job's steady state)
//   Pretokenize       the PCRE2 pre-tokeniser alone
// The corpus is the file TRIDENT_BENCH_CORPUS names (tests/text/tools/make_corpus.sh writes the test one).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>

#include "text/bpe_tokenizer.hpp"
#include "text/tokenizer_files.hpp"

namespace {

using trident::text::BpeTokenizer;

const std::string& corpus() {
  static const std::string text = [] {
    const char* path = std::getenv("TRIDENT_BENCH_CORPUS");
    if (path == nullptr) throw std::runtime_error("set TRIDENT_BENCH_CORPUS to a UTF-8 text file");
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error(std::string("cannot read ") + path);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }();
  return text;
}

void report(benchmark::State& state, size_t tokens_per_pass) {
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(corpus().size()));
  state.SetItemsProcessed(int64_t(state.iterations()) * int64_t(tokens_per_pass));
  state.counters["tokens_per_s"] =
      benchmark::Counter(double(state.iterations()) * double(tokens_per_pass), benchmark::Counter::kIsRate);
}

void Gpt2EncodeCold(benchmark::State& state) {
  const trident::text::BpeVocabulary vocabulary = trident::text::gpt2_vocabulary();
  std::vector<uint32_t> ids;
  for (auto _ : state) {
    state.PauseTiming();
    auto tokenizer = std::make_unique<BpeTokenizer>(vocabulary);
    ids.clear();
    state.ResumeTiming();
    tokenizer->encode(corpus(), ids);
    benchmark::DoNotOptimize(ids.data());
  }
  report(state, ids.size());
}

void Gpt2EncodeWarm(benchmark::State& state) {
  BpeTokenizer tokenizer(trident::text::gpt2_vocabulary());
  std::vector<uint32_t> ids;
  tokenizer.encode(corpus(), ids);
  for (auto _ : state) {
    ids.clear();
    tokenizer.encode(corpus(), ids);
    benchmark::DoNotOptimize(ids.data());
  }
  report(state, ids.size());
}

void Pretokenize(benchmark::State& state) {
  trident::text::Pretokenizer pretokenizer;
  std::vector<std::string_view> pieces;
  for (auto _ : state) {
    pieces.clear();
    pretokenizer.split(corpus(), pieces);
    benchmark::DoNotOptimize(pieces.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(corpus().size()));
  state.counters["pieces_per_s"] =
      benchmark::Counter(double(state.iterations()) * double(pieces.size()), benchmark::Counter::kIsRate);
}

BENCHMARK(Gpt2EncodeCold)->Name("Gpt2Encode/cold")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(Gpt2EncodeWarm)->Name("Gpt2Encode/warm")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(Pretokenize)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
