#pragma once
// Buffers in a backend's memory for the kernel benchmarks (benchmarks/kernels/bench_kernels.cpp on the
// Kokkos backend, benchmarks/gpu/bench_cuda_kernels.cpp on the CUDA one): freed with the object.
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels.hpp"

namespace trident::bench {

// n floats filled with uniform(lo, hi) values (lo = hi = 0: left zero, as alloc() leaves them). At most
// 2^20 values are drawn on the host; a longer buffer repeats them, copied on the device, so that a
// buffer of a GPT-2 step's size (the parameters, the [N, V] logits) takes milliseconds to fill.
class DeviceBuf {
 public:
  DeviceBuf(Kernels& k, int64_t n, float lo = -1.0f, float hi = 1.0f, uint32_t seed = 1) : k_(k), p_(k.alloc(n)) {
    if (lo == 0.0f && hi == 0.0f) return;
    std::vector<float> h(size_t(std::min<int64_t>(n, kDrawn)));
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    for (auto& x : h) x = d(gen);
    k.copy_to_device(p_, h.data(), int64_t(h.size()));
    for (int64_t done = int64_t(h.size()); done < n; done *= 2) k.copy(p_ + done, p_, std::min(done, n - done));
  }
  ~DeviceBuf() { k_.free(p_); }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
  float* get() const { return p_; }

 private:
  static constexpr int64_t kDrawn = int64_t(1) << 20;
  Kernels& k_;
  float* p_;
};

// n token ids drawn uniformly from [0, vocab).
class DeviceTokens {
 public:
  DeviceTokens(Kernels& k, int64_t n, int32_t vocab) : k_(k), p_(k.alloc_int(n)) {
    std::vector<int32_t> h(static_cast<size_t>(n));
    std::mt19937 gen(7);
    std::uniform_int_distribution<int32_t> d(0, vocab - 1);
    for (auto& x : h) x = d(gen);
    k.copy_to_device_int(p_, h.data(), n);
  }
  ~DeviceTokens() { k_.free(p_); }
  DeviceTokens(const DeviceTokens&) = delete;
  DeviceTokens& operator=(const DeviceTokens&) = delete;
  int32_t* get() const { return p_; }

 private:
  Kernels& k_;
  int32_t* p_;
};

}  // namespace trident::bench
