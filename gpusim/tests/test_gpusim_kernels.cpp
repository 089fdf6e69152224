// gpu-sim's kernels: indices, barriers, shared memory, 32-lane shuffles and votes against CUDA's
// documented semantics (expected values computed here from the definitions), atomics, launch
// validation, and the faults that stand for a GPU's hang or garbage. Tests that fault a device use a
// device of their own (a fault is sticky for the rest of the process).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "device_arrays.hpp"

namespace {

using gpusim_test::device_array;
using gpusim_test::launch;
using gpusim_test::to_host;

// ---- indices ----

__global__ void record_indices(unsigned* out) {
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned global = block * blockDim.x * blockDim.y * blockDim.z + thread;
  atomicAdd(&out[4 * global], 1u);
  out[4 * global + 1] = blockIdx.x * 10000 + blockIdx.y * 100 + blockIdx.z;
  out[4 * global + 2] = threadIdx.x * 10000 + threadIdx.y * 100 + threadIdx.z;
  out[4 * global + 3] = gridDim.x * 1000000 + gridDim.y * 10000 + blockDim.x * 100 + blockDim.y * 10 + blockDim.z;
}

TEST(GpuSimKernels, EveryThreadOfA3dGridRunsOnceWithItsIndices) {
  const dim3 grid(3, 2, 2), block(5, 4, 3);
  const size_t n = 3 * 2 * 2 * 5 * 4 * 3;
  unsigned* out = device_array<unsigned>(4 * n);
  ASSERT_EQ(launch(record_indices, grid, block, 0, out), cudaSuccess);
  const auto h = to_host(out, 4 * n);
  size_t g = 0;
  for (unsigned bz = 0; bz < 2; ++bz)
    for (unsigned by = 0; by < 2; ++by)
      for (unsigned bx = 0; bx < 3; ++bx)
        for (unsigned tz = 0; tz < 3; ++tz)
          for (unsigned ty = 0; ty < 4; ++ty)
            for (unsigned tx = 0; tx < 5; ++tx, ++g) {
              ASSERT_EQ(h[4 * g], 1u) << "thread " << g << " ran " << h[4 * g] << " times";
              ASSERT_EQ(h[4 * g + 1], bx * 10000 + by * 100 + bz);
              ASSERT_EQ(h[4 * g + 2], tx * 10000 + ty * 100 + tz);
              ASSERT_EQ(h[4 * g + 3], 3u * 1000000 + 2 * 10000 + 5 * 100 + 4 * 10 + 3);
            }
  cudaFree(out);
}

// ---- barriers and shared memory ----

// Reverses each block's slice through shared memory: needs the barrier between the writes and reads.
__global__ void reverse_in_blocks(float* data, bool with_barrier) {
  __shared__ float tile[256];
  const unsigned i = threadIdx.x;
  tile[i] = data[blockIdx.x * blockDim.x + i];
  if (with_barrier) __syncthreads();
  data[blockIdx.x * blockDim.x + i] = tile[blockDim.x - 1 - i];
}

TEST(GpuSimKernels, SharedMemoryIsPerBlockAndTheBarrierOrdersIt) {
  const int blocks = 4, threads = 256;
  std::vector<float> h(blocks * threads);
  std::iota(h.begin(), h.end(), 0.0f);
  float* d = device_array<float>(h.size());
  cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice);
  ASSERT_EQ(launch(reverse_in_blocks, blocks, threads, 0, d, true), cudaSuccess);
  const auto out = to_host(d, h.size());
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < threads; ++t) ASSERT_EQ(out[b * threads + t], h[b * threads + threads - 1 - t]);
  cudaFree(d);
}

// Without its barrier the same kernel reads tile entries not yet written in this block: what a GPU
// may do too. gpu-sim runs the threads of a block one after another between barriers, so half the
// threads (those running before their partner, in either thread order) always read stale entries.
TEST(GpuSimKernels, AMissingBarrierGivesWrongResults) {
  const int blocks = 4, threads = 256;
  std::vector<float> h(blocks * threads);
  std::iota(h.begin(), h.end(), 0.0f);
  float* d = device_array<float>(h.size());
  cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice);
  ASSERT_EQ(launch(reverse_in_blocks, blocks, threads, 0, d, false), cudaSuccess);
  const auto out = to_host(d, h.size());
  int wrong = 0;
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < threads; ++t) wrong += out[b * threads + t] != h[b * threads + threads - 1 - t];
  EXPECT_GE(wrong, threads / 2);  // a block may find its own values left by the previous kernel
  cudaFree(d);
}

__global__ void count_and_or(int* out) {
  const int t = int(threadIdx.x);
  out[0 * blockDim.x + t] = __syncthreads_count(t % 3 == 0);
  out[1 * blockDim.x + t] = __syncthreads_and(t < 1000);
  out[2 * blockDim.x + t] = __syncthreads_and(t != 17);
  out[3 * blockDim.x + t] = __syncthreads_or(t == 200);
  out[4 * blockDim.x + t] = __syncthreads_or(0);
}

TEST(GpuSimKernels, BarrierReductions) {
  const int threads = 256;
  int* d = device_array<int>(5 * threads);
  ASSERT_EQ(launch(count_and_or, 1, threads, 0, d), cudaSuccess);
  const auto h = to_host(d, 5 * threads);
  for (int t = 0; t < threads; ++t) {
    EXPECT_EQ(h[t], (threads + 2) / 3);
    EXPECT_EQ(h[threads + t], 1);
    EXPECT_EQ(h[2 * threads + t], 0);
    EXPECT_EQ(h[3 * threads + t], 1);
    EXPECT_EQ(h[4 * threads + t], 0);
  }
  cudaFree(d);
}

// Threads that return early count as arrived at later barriers (as on GPUs since Volta).
__global__ void early_exit_then_barrier(int* out) {
  if (threadIdx.x >= 40) return;
  __shared__ int s[64];
  s[threadIdx.x] = int(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = s[39 - threadIdx.x];
}

TEST(GpuSimKernels, ExitedThreadsDoNotHoldABarrier) {
  int* d = device_array<int>(64);
  ASSERT_EQ(launch(early_exit_then_barrier, 1, 64, 0, d), cudaSuccess);
  const auto h = to_host(d, 64);
  for (int t = 0; t < 40; ++t) EXPECT_EQ(h[t], 39 - t);
}

// ---- warp shuffles and votes ----

enum Mode { kIdx, kUp, kDown, kXor };

__global__ void shuffle_kernel(int* out, int mode, int arg, int width) {
  const int lane = int(threadIdx.x) % 32;
  const int v = 1000 * int(blockIdx.x) + int(threadIdx.x);
  int r = 0;
  switch (mode) {
    case kIdx: r = __shfl_sync(0xffffffffu, v, arg + lane % 3, width); break;  // per-lane source
    case kUp: r = __shfl_up_sync(0xffffffffu, v, unsigned(arg), width); break;
    case kDown: r = __shfl_down_sync(0xffffffffu, v, unsigned(arg), width); break;
    case kXor: r = __shfl_xor_sync(0xffffffffu, v, arg, width); break;
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = r;
  (void)lane;
}

// The lane whose value lane `l` receives, from the CUDA programming guide's description of each
// shuffle with a sub-warp width w.
int expected_source(int mode, int l, int arg, int w) {
  const int seg = l / w * w, in = l % w;
  switch (mode) {
    case kIdx: return seg + (arg + l % 3) % w;
    case kUp: return in >= arg ? l - arg : l;
    case kDown: return in + arg < w ? l + arg : l;
    default: {  // xor: lanes of earlier groups may be read, later ones give the caller's own value
      const int s = l ^ arg;
      return s < seg + w ? s : l;
    }
  }
}

TEST(GpuSimKernels, ShufflesFollowCudaSemanticsForEveryWidth) {
  const int threads = 128, blocks = 2;
  int* d = device_array<int>(threads * blocks);
  for (int mode : {kIdx, kUp, kDown, kXor})
    for (int width : {32, 16, 8, 4, 2, 1})
      for (int arg : {0, 1, 3, 7, 16, 31}) {
        ASSERT_EQ(launch(shuffle_kernel, blocks, threads, 0, d, mode, arg, width), cudaSuccess);
        const auto h = to_host(d, threads * blocks);
        for (int b = 0; b < blocks; ++b)
          for (int t = 0; t < threads; ++t) {
            const int warp0 = t / 32 * 32;
            const int src = warp0 + expected_source(mode, t % 32, arg, width);
            ASSERT_EQ(h[b * threads + t], 1000 * b + src)
                << "mode " << mode << " width " << width << " arg " << arg << " thread " << t;
          }
      }
  cudaFree(d);
}

__global__ void butterfly_sum(double* out, const double* in) {
  double v = in[threadIdx.x];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  out[threadIdx.x] = v;
}

TEST(GpuSimKernels, ButterflySumOfDoublesGivesEveryLaneTheWarpSum) {
  std::vector<double> h(64);
  for (int i = 0; i < 64; ++i) h[i] = 0.5 * i + 1e-3 * i * i;
  double *in = device_array<double>(64), *out = device_array<double>(64);
  cudaMemcpy(in, h.data(), 64 * sizeof(double), cudaMemcpyHostToDevice);
  ASSERT_EQ(launch(butterfly_sum, 1, 64, 0, out, in), cudaSuccess);
  const auto r = to_host(out, 64);
  for (int w = 0; w < 2; ++w) {
    double s = 0;
    for (int i = 0; i < 32; ++i) s += h[32 * w + i];
    for (int i = 0; i < 32; ++i) EXPECT_NEAR(r[32 * w + i], s, 1e-12 * s);
  }
}

__global__ void votes(unsigned* out) {
  const int t = int(threadIdx.x);
  out[4 * t] = __ballot_sync(0xffffffffu, t % 5 == 0);
  out[4 * t + 1] = unsigned(__any_sync(0xffffffffu, t == 70));
  out[4 * t + 2] = unsigned(__all_sync(0xffffffffu, t < 90));
  out[4 * t + 3] = __activemask();
}

TEST(GpuSimKernels, VotesPerWarp) {
  const int threads = 96;
  unsigned* d = device_array<unsigned>(4 * threads);
  ASSERT_EQ(launch(votes, 1, threads, 0, d), cudaSuccess);
  const auto h = to_host(d, 4 * threads);
  for (int t = 0; t < threads; ++t) {
    const int w = t / 32;
    unsigned ballot = 0;
    for (int l = 0; l < 32; ++l) ballot |= unsigned((32 * w + l) % 5 == 0) << l;
    EXPECT_EQ(h[4 * t], ballot);
    EXPECT_EQ(h[4 * t + 1], unsigned(w == 2));
    EXPECT_EQ(h[4 * t + 2], unsigned(w < 2));
    EXPECT_EQ(h[4 * t + 3], 0xffffffffu);
  }
}

// ---- atomics ----

__global__ void atomics(float* fsum, int* imax, unsigned long long* count, int* cas) {
  const int g = int(blockIdx.x * blockDim.x + threadIdx.x);
  atomicAdd(fsum, 0.5f);
  atomicMax(imax, (g * 37) % 1000);
  atomicAdd(count, 1ull);
  atomicCAS(cas, 0, g + 1);  // only the first thread to get there succeeds
}

TEST(GpuSimKernels, Atomics) {
  float* f = device_array<float>(1);
  int* m = device_array<int>(1);
  unsigned long long* c = device_array<unsigned long long>(1);
  int* cas = device_array<int>(1);
  ASSERT_EQ(launch(atomics, 8, 128, 0, f, m, c, cas), cudaSuccess);
  EXPECT_EQ(to_host(f, 1)[0], 512.0f);
  int best = 0;
  for (int g = 0; g < 1024; ++g) best = std::max(best, (g * 37) % 1000);
  EXPECT_EQ(to_host(m, 1)[0], best);
  EXPECT_EQ(to_host(c, 1)[0], 1024ull);
  const int winner = to_host(cas, 1)[0];
  EXPECT_GE(winner, 1);
  EXPECT_LE(winner, 1024);
}

// ---- dynamic shared memory and launch limits ----

__global__ void dynamic_shared_sum(long long* out, int n) {
  GPUSIM_DYNAMIC_SHARED(int, buf);
  for (int i = int(threadIdx.x); i < n; i += int(blockDim.x)) buf[i] = i;
  __syncthreads();
  if (threadIdx.x == 0) {
    long long s = 0;
    for (int i = 0; i < n; ++i) s += buf[i];
    out[blockIdx.x] = s;
  }
}

TEST(GpuSimKernels, DynamicSharedMemoryAbove48KbNeedsTheFunctionAttribute) {
  const int n = 20000;  // 80000 bytes
  long long* d = device_array<long long>(2);
  EXPECT_EQ(launch(dynamic_shared_sum, 2, 256, n * sizeof(int), d, n), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "a launch error is not sticky";
  ASSERT_EQ(cudaFuncSetAttribute(dynamic_shared_sum, cudaFuncAttributeMaxDynamicSharedMemorySize, n * 4), cudaSuccess);
  ASSERT_EQ(launch(dynamic_shared_sum, 2, 256, n * sizeof(int), d, n), cudaSuccess);
  const auto h = to_host(d, 2);
  EXPECT_EQ(h[0], (long long)n * (n - 1) / 2);
  EXPECT_EQ(h[1], h[0]);
  EXPECT_EQ(cudaFuncSetAttribute(dynamic_shared_sum, cudaFuncAttributeMaxDynamicSharedMemorySize, 228 << 10),
            cudaErrorInvalidValue)
      << "an H100 offers at most 227 KB per block";
  cudaGetLastError();
}

__global__ void nothing() {}

TEST(GpuSimKernels, LaunchConfigurationsAreCheckedAsOnAnH100) {
  const dim3 bad_blocks[] = {dim3(1025), dim3(1024, 2), dim3(1, 1, 65), dim3(0), dim3(32, 33)};
  for (dim3 b : bad_blocks) {
    EXPECT_EQ(launch(nothing, 1, b, 0), cudaErrorInvalidConfiguration) << b.x << "x" << b.y << "x" << b.z;
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  }
  const dim3 bad_grids[] = {dim3(1, 65536), dim3(1, 1, 65536), dim3(0)};
  for (dim3 g : bad_grids) {
    EXPECT_EQ(launch(nothing, g, 32, 0), cudaErrorInvalidConfiguration);
    cudaGetLastError();
  }
  EXPECT_EQ(launch(nothing, dim3(70000), 1, 0), cudaSuccess);  // x may exceed 65535
  EXPECT_EQ(launch(nothing, dim3(1, 65535, 2), 1, 0), cudaSuccess);
  EXPECT_EQ(launch(nothing, 1, dim3(32, 32), 0), cudaSuccess);
  EXPECT_EQ(launch(nothing, 1, dim3(1, 1, 64), 0), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// ---- block order ----

__global__ void record_block_order(int* order, int* next) { order[atomicAdd(next, 1)] = int(blockIdx.x); }

TEST(GpuSimKernels, BlocksRunInAShuffledOrder) {
  const int blocks = 64;
  int *order = device_array<int>(blocks), *next = device_array<int>(1);
  ASSERT_EQ(launch(record_block_order, blocks, 1, 0, order, next), cudaSuccess);
  auto h = to_host(order, blocks);
  std::vector<int> identity(blocks);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(h, identity) << "blocks ran in index order: a kernel depending on that would pass here";
  std::sort(h.begin(), h.end());
  EXPECT_EQ(h, identity);
}

// ---- faults: each on a device of its own ----

class Fault : public ::testing::Test {
 protected:
  void use_device(int d) { ASSERT_EQ(cudaSetDevice(d), cudaSuccess); }
  void TearDown() override { cudaSetDevice(0); }
  // The error that the stream's next synchronisation reports, and that stays.
  void expect_sticky(cudaError_t e) {
    EXPECT_EQ(cudaDeviceSynchronize(), e);
    EXPECT_EQ(cudaGetLastError(), e) << "a device fault is sticky";
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, 16), e);
  }
};

__global__ void shuffle_in_partial_warp(int* out) { out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1); }

TEST_F(Fault, AFullMaskInAPartialWarpFaults) {
  use_device(1);
  int* d = device_array<int>(64);
  ASSERT_EQ(launch(shuffle_in_partial_warp, 1, 48, 0, d), cudaSuccess);
  expect_sticky(cudaErrorLaunchFailure);
}

__global__ void barrier_and_shuffle(int* out) {
  if (threadIdx.x % 32 < 16) {
    __syncthreads();
  } else {
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);  // waits for lanes stuck at the barrier
  }
}

TEST_F(Fault, ThreadsWaitingForEachOtherAtDifferentBarriersFault) {
  use_device(2);
  int* d = device_array<int>(64);
  ASSERT_EQ(launch(barrier_and_shuffle, 1, 64, 0, d), cudaSuccess);
  expect_sticky(cudaErrorLaunchFailure);
}

__global__ void shuffle_after_exit(int* out) {
  if (threadIdx.x == 5) return;
  out[threadIdx.x] = __shfl_down_sync(0xffffffffu, int(threadIdx.x), 1);
}

TEST_F(Fault, AMaskNamingAnExitedLaneFaults) {
  use_device(3);
  int* d = device_array<int>(32);
  ASSERT_EQ(launch(shuffle_after_exit, 1, 32, 0, d), cudaSuccess);
  expect_sticky(cudaErrorLaunchFailure);
}

__global__ void write_through(float* p) { p[threadIdx.x] = 1.0f; }

TEST_F(Fault, APageableHostPointerArgumentIsAnIllegalAddress) {
  use_device(4);
  std::vector<float> host(32);
  ASSERT_EQ(launch(write_through, 1, 32, 0, host.data()), cudaSuccess);
  expect_sticky(cudaErrorIllegalAddress);
  EXPECT_EQ(host[0], 0.0f) << "the faulting kernel must not have run";
}

__global__ void trap_kernel() { __trap(); }

TEST_F(Fault, TrapIsALaunchFailureAndOtherDevicesCarryOn) {
  use_device(5);
  ASSERT_EQ(launch(trap_kernel, 1, 1, 0), cudaSuccess);
  expect_sticky(cudaErrorLaunchFailure);
  use_device(6);
  float* d = device_array<float>(32);
  EXPECT_EQ(launch(write_through, 1, 32, 0, d), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// Partial masks: lanes outside the mask keep their own values; a lane reading one gets garbage.
__global__ void half_warp_sum(int* out) {
  int v = int(threadIdx.x);
  if (threadIdx.x < 16) {
    for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0x0000ffffu, v, o);
    out[threadIdx.x] = v;
    out[32 + threadIdx.x] = __shfl_down_sync(0x0000ffffu, 7, 16);  // lane + 16 is outside the mask
  }
}

TEST(GpuSimKernels, PartialMasksReduceTheirLanesAndReadingOthersGivesGarbage) {
  int* d = device_array<int>(64);
  ASSERT_EQ(launch(half_warp_sum, 1, 32, 0, d), cudaSuccess);
  const auto h = to_host(d, 64);
  for (int t = 0; t < 16; ++t) {
    EXPECT_EQ(h[t], 120);
    EXPECT_EQ(h[32 + t], -1) << "a value from a lane outside the mask must not look valid";
  }
}

}  // namespace
