#pragma once
// Preconditions of the Kernels interface that every backend checks the same way, with the same
// message (trident::Error): the head counts of grouped-query attention, RoPE's row range and AdamW's
// segment table.
#include <cstdint>

#include "core/error.hpp"
#include "kernels.hpp"

namespace trident {

// NH query heads share KVH key/value heads in groups of NH / KVH: KVH must divide NH.
inline void check_attention_heads(const char* op, int64_t NH, int64_t KVH) {
  TRIDENT_CHECK(NH >= 1 && KVH >= 1 && NH % KVH == 0,
                "{}: {} query heads cannot share {} key/value heads (the key/value heads must divide the query "
                "heads: NH a positive multiple of KVH)",
                op, NH, KVH);
}

// RoPE rotates pairs (i, i + HD/2): HD even; rows [t_begin, t_begin + t_count) within the T rows.
inline void check_rope(const char* op, int64_t T, int64_t NH, int64_t KVH, int64_t HD, int64_t t_begin,
                       int64_t t_count) {
  check_attention_heads(op, NH, KVH);
  TRIDENT_CHECK(HD >= 2 && HD % 2 == 0, "{}: head size {} is odd (RoPE rotates pairs of dimensions)", op, HD);
  TRIDENT_CHECK(attention_rows_valid(T, t_begin, t_count), "{}: rows [{}, {}) outside [0, {})", op, t_begin,
                t_begin + t_count, T);
}

// AdamW's segments start at 0 and at increasing elements below n (n > 0), or there are none (n 0).
inline void check_adamw_segments(const std::vector<AdamWSegment>& segments, int64_t n) {
  TRIDENT_CHECK(n == 0 || (!segments.empty() && segments.front().begin == 0),
                "adamw_update: {} elements need segments starting at element 0", n);
  for (size_t s = 1; s < segments.size(); ++s)
    TRIDENT_CHECK(segments[s - 1].begin < segments[s].begin && segments[s].begin < n,
                  "adamw_update: segment {} begins at element {}; it must begin after segment {} (at {}) and "
                  "before the end ({})",
                  s, segments[s].begin, s - 1, segments[s - 1].begin, n);
}

}  // namespace trident
