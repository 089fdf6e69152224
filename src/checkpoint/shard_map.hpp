#pragma once
// Where the elements a rank holds sit in the global Hugging Face datasets of a checkpoint.
//
// A rank holds, for each tensor of its ParameterLayout, a TP slice in trident's storage layout
// ([out, in], vocabulary padded to Vp). The dataset of that tensor is the whole tensor in Hugging
// Face layout ([in, out] for Conv1D, V rows). The slice (or any contiguous range of its elements, as
// ZeRO partitions a flat buffer) maps onto a few rectangles of the dataset:
//   Rows split      -> a row block (a column block after the Conv1D transpose: c_fc)
//   Cols split      -> a column block (a row block after the transpose: the c_proj weights)
//   QkvRows split   -> three row blocks q, k, v (three column blocks of c_attn's [C, 3C])
//   vocabulary padding rows (>= V) -> nothing.
// Each rectangle records how to address its elements in the rank's buffer, so packing into and
// unpacking from the order of an HDF5 hyperslab union is one loop.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "model/parameters.hpp"

namespace trident::ckpt {

struct Block {
  int64_t row0 = 0, rows = 0, col0 = 0, cols = 0;  // in the dataset ([n] datasets: [n, 1])
  int64_t src = 0;                                 // buffer index of element (row0, col0)
  int64_t src_row_stride = 0, src_col_stride = 0;  // buffer index steps per dataset row / column
  int64_t count() const { return rows * cols; }
};

// Shape of tensor t's dataset: its global shape in Hugging Face layout (Conv1D transposed, the
// vocabulary unpadded). s: the shapes of the layout t belongs to (for V).
std::vector<int64_t> dataset_shape(const ParamTensor& t, const GptShapes& s);

// The blocks of elements [begin, end) of tensor t (element indices within t's local storage) held
// by TP rank tp_rank of tp_size; src indices are relative to t's element 0. Padding rows dropped.
std::vector<Block> tensor_blocks(const ParamTensor& t, const GptShapes& s, int tp_rank, int tp_size, int64_t begin,
                                 int64_t end);

// Calls fn(dataset_index, buffer_index, packed_index) for every element of `blocks`, where
// packed_index is the element's position in the row-major order of the dataset (which is the order
// HDF5 uses for the elements of a union of hyperslabs, i.e. of the packed transfer buffer).
// dataset_cols: the dataset's number of columns (1 for [n] datasets). Blocks must not overlap.
// Elements are visited in tiles when the buffer is transposed against the dataset (Conv1D), so
// neither side is walked with a large stride; callers must not depend on the visiting order.
template <class Fn>
void for_each_element(const std::vector<Block>& blocks, int64_t dataset_cols, Fn fn);

int64_t total_count(const std::vector<Block>& blocks);

// ---- implementation ----

template <class Fn>
void for_each_element(const std::vector<Block>& blocks, int64_t dataset_cols, Fn fn) {
  if (blocks.empty()) return;
  // Row breakpoints: between two consecutive ones the set of blocks covering a row is constant,
  // and so is the packed width of a row.
  std::vector<int64_t> cuts;
  for (const auto& b : blocks) {
    cuts.push_back(b.row0);
    cuts.push_back(b.row0 + b.rows);
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<const Block*> active;
  int64_t packed_base = 0;
  constexpr int64_t kTile = 64;
  for (size_t k = 0; k + 1 < cuts.size(); ++k) {
    const int64_t r0 = cuts[k], r1 = cuts[k + 1];
    active.clear();
    for (const auto& b : blocks)
      if (b.row0 <= r0 && r1 <= b.row0 + b.rows) active.push_back(&b);
    std::sort(active.begin(), active.end(), [](const Block* a, const Block* b) { return a->col0 < b->col0; });
    int64_t width = 0;
    for (const Block* b : active) width += b->cols;
    int64_t col_offset = 0;  // of this block within a packed row of the segment
    for (const Block* b : active) {
      const int64_t src0 = b->src + (r0 - b->row0) * b->src_row_stride;
      if (b->src_col_stride == 1) {
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t di = r * dataset_cols + b->col0;
          const int64_t si = src0 + (r - r0) * b->src_row_stride;
          const int64_t pi = packed_base + (r - r0) * width + col_offset;
          for (int64_t c = 0; c < b->cols; ++c) fn(di + c, si + c, pi + c);
        }
      } else {
        for (int64_t rt = r0; rt < r1; rt += kTile)
          for (int64_t ct = 0; ct < b->cols; ct += kTile) {
            const int64_t re = std::min(r1, rt + kTile), ce = std::min(b->cols, ct + kTile);
            for (int64_t r = rt; r < re; ++r) {
              const int64_t di = r * dataset_cols + b->col0;
              const int64_t si = src0 + (r - r0) * b->src_row_stride;
              const int64_t pi = packed_base + (r - r0) * width + col_offset;
              for (int64_t c = ct; c < ce; ++c) fn(di + c, si + c * b->src_col_stride, pi + c);
            }
          }
      }
      col_offset += b->cols;
    }
    packed_base += (r1 - r0) * width;
  }
}

}  // namespace trident::ckpt
