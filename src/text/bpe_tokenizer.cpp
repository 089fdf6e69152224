#include "text/bpe_tokenizer.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace trident::text {
namespace {

constexpr uint32_t kMergedAway = ~0u;
// Bounds of the piece cache: cleared past either (a few tens of MB at most).
constexpr size_t kMaxCachedPieces = 1 << 18;
constexpr size_t kMaxCachedTokens = 1 << 22;
// Longer pieces (whitespace or digit runs, long words in scripts without spaces) are not cached.
constexpr size_t kMaxCachedPieceBytes = 256;

uint64_t pair_key(uint32_t left, uint32_t right) { return uint64_t(left) << 32 | right; }

}  // namespace

BpeTokenizer::BpeTokenizer(BpeVocabulary vocabulary)
    : tokens_(std::move(vocabulary.tokens)), source_(std::move(vocabulary.source)) {
  std::fill(std::begin(byte_token_), std::end(byte_token_), kMergedAway);
  for (uint32_t id = 0; id < tokens_.size(); ++id) {
    if (tokens_[id].size() == 1) byte_token_[static_cast<unsigned char>(tokens_[id][0])] = id;
  }
  for (int b = 0; b < 256; ++b) {
    if (byte_token_[b] == kMergedAway)
      throw Error(fmt::format("{}: no token for the byte 0x{:02X}: not a byte-level BPE vocabulary", source_, b));
  }
  merges_.reserve(vocabulary.merges.size());
  for (size_t rank = 0; rank < vocabulary.merges.size(); ++rank) {
    const BpeMerge& m = vocabulary.merges[rank];
    const size_t n = tokens_.size();
    if (m.left >= n || m.right >= n || m.merged >= n)
      throw Error(fmt::format("{}: merge {} names a token id out of range (vocabulary of {})", source_, rank + 1, n));
    if (!merges_.emplace(pair_key(m.left, m.right), MergeResult{uint32_t(rank), m.merged}).second)
      throw Error(fmt::format("{}: merge {} repeats the pair of an earlier merge", source_, rank + 1));
  }
}

const BpeTokenizer::MergeResult* BpeTokenizer::find_merge(uint32_t left, uint32_t right) const {
  const auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

uint32_t BpeTokenizer::token_id(std::string_view bytes) const {
  for (uint32_t id = 0; id < tokens_.size(); ++id) {
    if (tokens_[id] == bytes) return id;
  }
  throw Error(fmt::format("{}: no token \"{}\"", source_, bytes));
}

void BpeTokenizer::encode(std::string_view text, std::vector<uint32_t>& out) {
  pieces_.clear();
  pretokenizer_.split(text, pieces_);
  for (const std::string_view piece : pieces_) {
    if (piece.size() > kMaxCachedPieceBytes) {
      merge_piece(piece, out);
      continue;
    }
    key_.assign(piece);
    const auto hit = cache_.find(key_);
    if (hit != cache_.end()) {
      const auto [offset, count] = hit->second;
      out.insert(out.end(), cached_tokens_.begin() + offset, cached_tokens_.begin() + offset + count);
      continue;
    }
    const size_t first = out.size();
    merge_piece(piece, out);
    if (cache_.size() >= kMaxCachedPieces || cached_tokens_.size() >= kMaxCachedTokens) {
      cache_.clear();
      cached_tokens_.clear();
    }
    cache_.emplace(key_, std::make_pair(uint32_t(cached_tokens_.size()), uint32_t(out.size() - first)));
    cached_tokens_.insert(cached_tokens_.end(), out.begin() + first, out.end());
  }
}

// The merges of one piece, O(n log n) in its length n: the symbols form a linked list, and a min-heap
// holds the candidate pairs. An entry goes stale when either side merges with another neighbour; it
// is then skipped when popped (its pair is no longer adjacent, or no longer has that rank).
void BpeTokenizer::merge_piece(std::string_view piece, std::vector<uint32_t>& out) {
  const int32_t n = static_cast<int32_t>(piece.size());
  symbols_.resize(n);
  for (int32_t i = 0; i < n; ++i)
    symbols_[i] = {byte_token_[static_cast<unsigned char>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1};
  heap_.clear();
  // Min-heap order: lowest rank first, then the leftmost pair.
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
  };
  const auto push_candidate = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    if (const MergeResult* m = find_merge(symbols_[left].token, symbols_[right].token)) {
      heap_.push_back({m->rank, left, right});
      std::push_heap(heap_.begin(), heap_.end(), later);
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_candidate(i, i + 1);
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), later);
    const Candidate c = heap_.back();
    heap_.pop_back();
    Symbol& left = symbols_[c.left];
    Symbol& right = symbols_[c.right];
    if (left.token == kMergedAway || right.token == kMergedAway || left.next != c.right) continue;
    const MergeResult* m = find_merge(left.token, right.token);
    if (m == nullptr || m->rank != c.rank) continue;
    left.token = m->merged;
    right.token = kMergedAway;
    left.next = right.next;
    if (right.next >= 0) symbols_[right.next].prev = c.left;
    push_candidate(left.prev, c.left);
    push_candidate(c.left, left.next);
  }
  for (int32_t i = 0; i >= 0; i = symbols_[i].next) out.push_back(symbols_[i].token);
}

std::string BpeTokenizer::decode(const std::vector<uint32_t>& tokens) const {
  std::string text;
  for (const uint32_t id : tokens) {
    if (id >= tokens_.size())
      throw Error(fmt::format("token id {} is out of range for {} (vocabulary of {})", id, source_, tokens_.size()));
    text += tokens_[id];
  }
  return text;
}

}  // namespace trident::text
