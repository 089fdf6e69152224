#!/usr/bin/env bash
# GPT-2 tokenizer speed per core: trident's (bench_tokenizer) against OpenAI's tiktoken (npm "tiktoken",
# its Rust core compiled to WebAssembly, under node), on the same corpus, one after the other, each
# pinned to the same core. Needs the tokenizer tests' packages (TRIDENT_WITH_TEXT_TESTS=1
# scripts/install-deps.sh) and bench_tokenizer built.
#   benchmarks/text/run.sh BUILD_DIR [CORPUS]     (default corpus: the test corpus, made into BUILD_DIR)
# Environment: SECONDS_EACH (tiktoken's measuring time, default 10), CORE (default 0).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:?usage: run.sh BUILD_DIR [CORPUS]}" && pwd)
corpus=${2:-$build/benchmarks/text/corpus.txt}
[[ -n ${2:-} ]] || "$root/tests/text/tools/make_corpus.sh" "$corpus"
npm_dir=${TRIDENT_NPM_DIR:-$root/.cache/npm}
core=${CORE:-0}
echo "corpus: $corpus ($(stat -c %s "$corpus") bytes); CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
taskset -c "$core" node "$root/tests/text/tools/tiktoken_gpt2.cjs" "$npm_dir" bench "$corpus" "${SECONDS_EACH:-10}"
TRIDENT_BENCH_CORPUS=$corpus taskset -c "$core" "$build/benchmarks/text/bench_tokenizer" --benchmark_min_time=2
