// Token (vocab-parallel) and position embeddings, forward and backward side by side.
//
// Token backward is deterministic without atomics: the (row-in-shard, position) pairs are sorted by
// row with a stable radix sort (positions stay in increasing order within a row), then the first
// sorted entry of each distinct row owns it: one block per (run start, 128-column slice) adds the
// run's dout rows in position order onto dwte, exactly the order of the Kokkos backend
// (dwte[row] += dout[i] for i ascending). Tokens outside the shard sort last under a sentinel key
// (vocab_count) and are skipped.
#include <cub/device/device_radix_sort.cuh>

#include "cuda/allocator.cuh"
#include "cuda/bf16.cuh"
#include "cuda/check.cuh"
#include "cuda/ops.cuh"

namespace trident::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kBackwardCols = 128;  // columns per block in the token backward
constexpr int64_t kMaxRowBlocks = int64_t(1) << 20;

__device__ inline float table_value(float x) { return x; }
__device__ inline float table_value(uint16_t bits) { return bf16_value(bits); }

// One block per row i (grid-stride over rows), threads over columns; wte of fp32 values or bf16 patterns.
template <class T>
__global__ void embedding_forward_kernel(float* out, const int32_t* tokens, const T* wte, int64_t vocab_begin,
                                         int64_t vocab_count, int64_t N, int64_t C) {
  for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
    const int64_t row = int64_t(tokens[i]) - vocab_begin;
    const bool in_shard = row >= 0 && row < vocab_count;
    float* dst = out + i * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dst[c] = in_shard ? table_value(wte[row * C + c]) : 0.0f;
  }
}

template <class T>
void launch_embedding_forward(cudaStream_t stream, float* out, const int32_t* tokens, const T* wte,
                              int64_t vocab_begin, int64_t vocab_count, int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return;
  TRIDENT_CUDA_CHECK(launch(embedding_forward_kernel<T>, unsigned(std::min(N, kMaxRowBlocks)), kThreads, 0, stream,
                            out, tokens, wte, vocab_begin, vocab_count, N, C));
}

// keys[i] = token row in the shard, or vocab_count (sentinel) outside it; positions[i] = i.
__global__ void embedding_keys_kernel(int32_t* keys, int32_t* positions, const int32_t* tokens, int64_t vocab_begin,
                                      int64_t vocab_count, int64_t N) {
  TRIDENT_GRID_STRIDE(i, N) {
    const int64_t row = int64_t(tokens[i]) - vocab_begin;
    keys[i] = (row >= 0 && row < vocab_count) ? int32_t(row) : int32_t(vocab_count);
    positions[i] = int32_t(i);
  }
}

// Block (s, y): if sorted entry s starts a run of equal keys (a distinct in-shard row), add the
// run's dout rows, in position order, onto dwte[row, c] for the block's column slice y.
__global__ void embedding_backward_kernel(float* dwte, const float* dout, const int32_t* keys,
                                          const int32_t* positions, int64_t vocab_count, int64_t N, int64_t C) {
  const int64_t s = blockIdx.x;
  const int32_t key = keys[s];
  if (key == vocab_count || (s > 0 && keys[s - 1] == key)) return;  // sentinel, or not a run start
  const int64_t c = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float* dst = dwte + int64_t(key) * C + c;
  float acc = *dst;
  for (int64_t r = s; r < N && keys[r] == key; ++r) acc += dout[int64_t(positions[r]) * C + c];
  *dst = acc;
}

__global__ void position_forward_kernel(float* out, const float* wpe, int64_t N, int64_t T, int64_t C,
                                        int64_t t_begin) {
  for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
    const float* src = wpe + (t_begin + i % T) * C;
    float* dst = out + i * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dst[c] += src[c];
  }
}

// Thread (t, c): dwpe[t_begin+t, c] += dout[b, t, c] for b = 0, 1, ... in order.
__global__ void position_backward_kernel(float* dwpe, const float* dout, int64_t B, int64_t T, int64_t C,
                                         int64_t t_begin) {
  const int64_t c = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
    float* dst = dwpe + (t_begin + t) * C + c;
    float acc = *dst;
    for (int64_t b = 0; b < B; ++b) acc += dout[(b * T + t) * C + c];
    *dst = acc;
  }
}

}  // namespace

void embedding_forward(cudaStream_t stream, float* out, const int32_t* tokens, const float* wte, int64_t vocab_begin,
                       int64_t vocab_count, int64_t N, int64_t C) {
  launch_embedding_forward(stream, out, tokens, wte, vocab_begin, vocab_count, N, C);
}

void embedding_forward(cudaStream_t stream, float* out, const int32_t* tokens, const uint16_t* wte,
                       int64_t vocab_begin, int64_t vocab_count, int64_t N, int64_t C) {
  launch_embedding_forward(stream, out, tokens, wte, vocab_begin, vocab_count, N, C);
}

void embedding_backward(cudaStream_t stream, DeviceAllocator& alloc, float* dwte, const float* dout,
                        const int32_t* tokens, int64_t vocab_begin, int64_t vocab_count, int64_t N, int64_t C) {
  if (N <= 0 || C <= 0 || vocab_count <= 0) return;
  TRIDENT_CHECK(N < (int64_t(1) << 31) && vocab_count < (int64_t(1) << 31),
                "embedding_backward: N = {} and vocab_count = {} must be below 2^31", N, vocab_count);
  TRIDENT_CHECK(ceil_div(C, kBackwardCols) <= 65535, "embedding_backward: C = {} too large", C);
  // Sort only the bits that can be set: keys are in [0, vocab_count].
  int end_bit = 1;
  while (end_bit < 31 && (int64_t(1) << end_bit) <= vocab_count) ++end_bit;

  const int64_t bytes = N * int64_t(sizeof(int32_t));
  auto* keys_in = static_cast<int32_t*>(alloc.allocate(bytes));
  auto* keys_out = static_cast<int32_t*>(alloc.allocate(bytes));
  auto* pos_in = static_cast<int32_t*>(alloc.allocate(bytes));
  auto* pos_out = static_cast<int32_t*>(alloc.allocate(bytes));
  TRIDENT_CUDA_CHECK(launch(embedding_keys_kernel, grid_for(N, kThreads), kThreads, 0, stream,
      keys_in, pos_in, tokens, vocab_begin, vocab_count, N));

  size_t temp_bytes = 0;  // size query: launches nothing
  TRIDENT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in, keys_out, pos_in, pos_out, int(N),
                                                     0, end_bit, stream));
  void* temp = alloc.allocate(int64_t(temp_bytes));
  TRIDENT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, pos_in, pos_out, int(N), 0,
                                                     end_bit, stream));

  const dim3 grid(unsigned(N), unsigned(ceil_div(C, kBackwardCols)));
  TRIDENT_CUDA_CHECK(launch(embedding_backward_kernel, grid, kBackwardCols, 0, stream,
      dwte, dout, keys_out, pos_out, vocab_count, N, C));
  // Stream-ordered release: later users of these blocks run after the kernels above.
  alloc.release(temp);
  alloc.release(pos_out);
  alloc.release(pos_in);
  alloc.release(keys_out);
  alloc.release(keys_in);
}

void position_forward(cudaStream_t stream, float* out, const float* wpe, int64_t B, int64_t T, int64_t C,
                      int64_t t_begin) {
  const int64_t N = B * T;
  if (N <= 0 || C <= 0) return;
  TRIDENT_CUDA_CHECK(launch(position_forward_kernel, unsigned(std::min(N, kMaxRowBlocks)), kThreads, 0, stream,
      out, wpe, N, T, C, t_begin));
}

void position_backward(cudaStream_t stream, float* dwpe, const float* dout, int64_t B, int64_t T, int64_t C,
                       int64_t t_begin) {
  if (T <= 0 || C <= 0 || B <= 0) return;
  TRIDENT_CHECK(ceil_div(C, kThreads) <= 65535, "position_backward: C = {} too large", C);
  const dim3 grid(unsigned(std::min(T, kMaxRowBlocks)), unsigned(ceil_div(C, kThreads)));
  TRIDENT_CUDA_CHECK(launch(position_backward_kernel, grid, kThreads, 0, stream, dwpe, dout, B, T, C, t_begin));
}

}  // namespace trident::cuda
