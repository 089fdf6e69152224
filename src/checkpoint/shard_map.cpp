#include "checkpoint/shard_map.hpp"

#include "core/error.hpp"

namespace trident::ckpt {
namespace {

bool padded_vocabulary(const ParamTensor& t) { return t.kind == ParamKind::Embedding && t.split == TpSplit::Rows; }

// A rectangle of the tensor in storage layout: global rows/cols and the local element it starts at.
struct StorageRect {
  int64_t grow0, rows, gcol0, cols;
  int64_t local_row0, local_col0;
};

}  // namespace

std::vector<int64_t> dataset_shape(const ParamTensor& t, const GptShapes& s) {
  const auto& g = t.global_shape;
  if (g.size() == 1) return {g[0]};
  if (t.conv1d) return {g[1], g[0]};
  return {padded_vocabulary(t) ? s.V : g[0], g[1]};
}

std::vector<Block> tensor_blocks(const ParamTensor& t, const GptShapes& s, int tp_rank, int tp_size, int64_t begin,
                                 int64_t end) {
  TRIDENT_CHECK(0 <= begin && begin <= end && end <= t.numel, "{}: element range [{}, {}) outside [0, {})", t.name,
                begin, end, t.numel);
  const int64_t rows = t.shape[0];
  const int64_t cols = t.shape.size() > 1 ? t.shape[1] : 1;
  const int64_t global_rows = t.global_shape[0];

  // 1. The element range as rectangles of the local tensor: a partial first row, whole rows, a
  //    partial last row.
  struct LocalRect {
    int64_t row0, rows, col0, cols;
  };
  std::vector<LocalRect> local;
  if (begin < end) {
    int64_t ra = begin / cols, ca = begin % cols;
    const int64_t rb = end / cols, cb = end % cols;
    if (ra == rb) {
      local.push_back({ra, 1, ca, cb - ca});
    } else {
      if (ca > 0) {
        local.push_back({ra, 1, ca, cols - ca});
        ++ra;
      }
      if (rb > ra) local.push_back({ra, rb - ra, 0, cols});
      if (cb > 0) local.push_back({rb, 1, 0, cb});
    }
  }

  // 2. Local rectangles -> global storage rectangles by the TP split.
  std::vector<StorageRect> global;
  for (const auto& l : local) {
    switch (t.split) {
      case TpSplit::None:
        global.push_back({l.row0, l.rows, l.col0, l.cols, l.row0, l.col0});
        break;
      case TpSplit::Rows:
        global.push_back({int64_t(t.part(tp_rank)) * rows + l.row0, l.rows, l.col0, l.cols, l.row0, l.col0});
        break;
      case TpSplit::Cols:
        global.push_back({l.row0, l.rows, int64_t(tp_rank) * cols + l.col0, l.cols, l.row0, l.col0});
        break;
      case TpSplit::QkvRows: {
        // Local rows are q | k | v blocks of rows/3; globally each block is global_rows/3 rows of
        // which this rank holds the tp_rank-th share.
        const int64_t block = rows / 3, global_block = global_rows / 3;
        for (int64_t r = l.row0; r < l.row0 + l.rows;) {
          const int64_t b = r / block;
          const int64_t stop = std::min(l.row0 + l.rows, (b + 1) * block);
          global.push_back({b * global_block + int64_t(tp_rank) * block + (r - b * block), stop - r, l.col0, l.cols, r,
                            l.col0});
          r = stop;
        }
        break;
      }
    }
  }
  (void)tp_size;

  // 3. Drop vocabulary padding rows, then transpose Conv1D tensors into the dataset's [in, out].
  std::vector<Block> out;
  for (auto g : global) {
    if (padded_vocabulary(t)) g.rows = std::min(g.grow0 + g.rows, s.V) - g.grow0;
    if (g.rows <= 0 || g.cols <= 0) continue;
    Block b;
    b.src = g.local_row0 * cols + g.local_col0;
    if (t.conv1d) {
      b.row0 = g.gcol0;
      b.rows = g.cols;
      b.col0 = g.grow0;
      b.cols = g.rows;
      b.src_row_stride = 1;
      b.src_col_stride = cols;
    } else {
      b.row0 = g.grow0;
      b.rows = g.rows;
      b.col0 = g.gcol0;
      b.cols = g.cols;
      b.src_row_stride = cols;
      b.src_col_stride = 1;
    }
    out.push_back(b);
  }
  return out;
}

int64_t total_count(const std::vector<Block>& blocks) {
  int64_t n = 0;
  for (const auto& b : blocks) n += b.count();
  return n;
}

}  // namespace trident::ckpt
