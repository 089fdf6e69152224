// gpu-sim's cub::DeviceRadixSort against cub's documented semantics: a stable sort of keys (and their
// values) by the bits [begin_bit, end_bit) of the keys, signed keys with negatives first, floats by
// value with -0.0 == +0.0, descending sorts; the temporary-storage protocol; stream order; and the
// device fault for arrays the GPU cannot reach. Expected orders come from std::stable_sort over the
// indices with a comparison written from the definition. Tests that fault a device use one of their
// own (a fault is sticky).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cub/cub.cuh>
#include <limits>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "device_fixture.hpp"

namespace {

template <class K>
std::vector<K> random_keys(size_t n, K lo, K hi, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::vector<K> v(n);
  if constexpr (std::is_floating_point_v<K>) {
    std::uniform_real_distribution<K> u(lo, hi);
    for (auto& x : v) x = u(rng);
  } else {
    std::uniform_int_distribution<K> u(lo, hi);
    for (auto& x : v) x = u(rng);
  }
  return v;
}

// Input positions in the order a stable sort by `before` puts them.
template <class K, class Before>
std::vector<int32_t> stable_order(const std::vector<K>& keys, Before before) {
  std::vector<int32_t> index(keys.size());
  std::iota(index.begin(), index.end(), 0);
  std::stable_sort(index.begin(), index.end(),
                   [&](int32_t x, int32_t y) { return before(keys[size_t(x)], keys[size_t(y)]); });
  return index;
}

template <class K>
std::vector<K> gather(const std::vector<K>& keys, const std::vector<int32_t>& order) {
  std::vector<K> out;
  for (int32_t i : order) out.push_back(keys[size_t(i)]);
  return out;
}

// The bits [begin, end) of an unsigned key.
uint64_t bits_of(uint64_t key, int begin, int end) {
  const int width = end - begin;
  return (key >> begin) & (width >= 64 ? ~uint64_t(0) : (uint64_t(1) << width) - 1);
}

using gpusim_test::wait_for_flag;

class RadixSort : public gpusim_test::DeviceFixture {
 protected:
  explicit RadixSort(int device = 0) : DeviceFixture(device) {}

  // Sorts keys and values (positions 0..n-1 unless given) on the stream; returns the sorted keys and
  // leaves the values in `values_out`.
  template <class K, class V = int32_t>
  std::vector<K> sort_pairs(const std::vector<K>& keys, std::vector<V>& values_out, int begin_bit = 0,
                            int end_bit = sizeof(K) * 8, bool descending = false, std::vector<V> values = {}) {
    if constexpr (std::is_integral_v<V>) {
      if (values.empty())
        for (size_t i = 0; i < keys.size(); ++i) values.push_back(V(i));
    }
    const K* keys_in = to_device(keys);
    const V* values_in = to_device(values);
    K* keys_out = to_device(keys);
    V* out = to_device(values);
    const int n = int(keys.size());
    auto run = [&](void* temp, size_t& bytes) {
      return descending ? cub::DeviceRadixSort::SortPairsDescending(temp, bytes, keys_in, keys_out, values_in, out, n,
                                                                    begin_bit, end_bit, stream)
                        : cub::DeviceRadixSort::SortPairs(temp, bytes, keys_in, keys_out, values_in, out, n, begin_bit,
                                                          end_bit, stream);
    };
    size_t bytes = 0;
    EXPECT_EQ(run(nullptr, bytes), cudaSuccess);
    EXPECT_EQ(run(device_bytes(bytes), bytes), cudaSuccess);
    values_out = to_host(out, keys.size());
    return to_host(keys_out, keys.size());
  }
};

class RadixSortFault : public RadixSort {
 protected:
  RadixSortFault() : RadixSort(-1) {}
};

// ---- order ----

TEST_F(RadixSort, PairsWithDuplicateKeysSortStably) {
  const auto keys = random_keys<int32_t>(2000, 0, 60, 1);
  std::vector<int32_t> values;
  const auto sorted = sort_pairs(keys, values);
  const auto order = stable_order(keys, [](int32_t a, int32_t b) { return a < b; });
  EXPECT_EQ(values, order) << "equal keys keep their input order";
  EXPECT_EQ(sorted, gather(keys, order));
}

TEST_F(RadixSort, OnlyTheBitRangeCounts) {
  const auto keys = random_keys<uint32_t>(1500, 0, std::numeric_limits<uint32_t>::max(), 2);
  for (auto [begin, end] : {std::pair{4, 12}, std::pair{0, 1}, std::pair{31, 32}, std::pair{7, 7}}) {
    std::vector<int32_t> values;
    const auto sorted = sort_pairs(keys, values, begin, end);
    const auto order = stable_order(
        keys, [b = begin, e = end](uint32_t x, uint32_t y) { return bits_of(x, b, e) < bits_of(y, b, e); });
    EXPECT_EQ(values, order) << "bits [" << begin << ", " << end << ")";
    EXPECT_EQ(sorted, gather(keys, order)) << "keys are output whole";
  }
}

TEST_F(RadixSort, SignedKeysPutNegativesFirst) {
  auto keys32 = random_keys<int32_t>(1000, -500, 500, 3);
  keys32.push_back(std::numeric_limits<int32_t>::min());
  keys32.push_back(std::numeric_limits<int32_t>::max());
  std::vector<int32_t> values;
  EXPECT_EQ(sort_pairs(keys32, values), gather(keys32, stable_order(keys32, std::less<int32_t>())));
  EXPECT_EQ(values, stable_order(keys32, std::less<int32_t>()));

  auto keys64 = random_keys<int64_t>(1000, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), 4);
  keys64.insert(keys64.end(), {0, -1, 1, std::numeric_limits<int64_t>::min(), -1});
  EXPECT_EQ(sort_pairs(keys64, values), gather(keys64, stable_order(keys64, std::less<int64_t>())));
  EXPECT_EQ(values, stable_order(keys64, std::less<int64_t>()));
}

TEST_F(RadixSort, DescendingIsStableToo) {
  const auto keys = random_keys<int32_t>(1200, -40, 40, 5);
  std::vector<int32_t> values;
  const auto sorted = sort_pairs(keys, values, 0, 32, true);
  const auto order = stable_order(keys, std::greater<int32_t>());
  EXPECT_EQ(values, order);
  EXPECT_EQ(sorted, gather(keys, order));
  // Descending over bits [0, 8) of unsigned 64-bit keys.
  const auto wide = random_keys<uint64_t>(800, 0, std::numeric_limits<uint64_t>::max(), 6);
  sort_pairs(wide, values, 0, 8, true);
  EXPECT_EQ(values, stable_order(wide, [](uint64_t x, uint64_t y) { return bits_of(x, 0, 8) > bits_of(y, 0, 8); }));
}

TEST_F(RadixSort, FloatKeysByValueWithBothZerosEqual) {
  auto keys = random_keys<float>(600, -100.0f, 100.0f, 7);
  for (float special : {0.0f, -0.0f, 0.0f, -0.0f, -std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::infinity(), -1e-40f, 1e-40f})
    keys.insert(keys.begin() + 37, special);
  std::vector<int32_t> values;
  const auto sorted = sort_pairs(keys, values);
  const auto order = stable_order(keys, std::less<float>());  // -0.0 < +0.0 is false both ways
  EXPECT_EQ(values, order);
  for (size_t i = 0; i < keys.size(); ++i)
    EXPECT_EQ(std::signbit(sorted[i]), std::signbit(keys[size_t(order[i])])) << "the key's bits come back: " << i;
  const auto descending = sort_pairs(keys, values, 0, 32, true);
  EXPECT_EQ(values, stable_order(keys, std::greater<float>()));
  EXPECT_EQ(descending, gather(keys, stable_order(keys, std::greater<float>())));
}

TEST_F(RadixSort, SortKeysAscendingAndDescending) {
  const auto keys = random_keys<uint64_t>(900, 0, 1000, 8);
  const uint64_t* in = to_device(keys);
  uint64_t* up = to_device(keys);
  uint64_t* down = to_device(keys);
  const int64_t n = int64_t(keys.size());  // a 64-bit count: cub's 64-bit offsets
  size_t up_bytes = 0, down_bytes = 0;
  ASSERT_EQ(cub::DeviceRadixSort::SortKeys(nullptr, up_bytes, in, up, n, 0, 64, stream), cudaSuccess);
  ASSERT_EQ(cub::DeviceRadixSort::SortKeys(device_bytes(up_bytes), up_bytes, in, up, n, 0, 64, stream), cudaSuccess);
  ASSERT_EQ(cub::DeviceRadixSort::SortKeysDescending(nullptr, down_bytes, in, down, n), cudaSuccess);
  ASSERT_EQ(cub::DeviceRadixSort::SortKeysDescending(device_bytes(down_bytes), down_bytes, in, down, n, 0, 64, stream),
            cudaSuccess);
  auto expect = keys;
  std::sort(expect.begin(), expect.end());
  EXPECT_EQ(to_host(up, keys.size()), expect);
  std::reverse(expect.begin(), expect.end());
  EXPECT_EQ(to_host(down, keys.size()), expect);
  EXPECT_EQ(to_host(in, keys.size()), keys) << "the input is left alone";
}

struct Payload {
  int32_t a;
  double b;
  char tag[3];
};

TEST_F(RadixSort, ValuesOfAnyTriviallyCopyableType) {
  const auto keys = random_keys<uint32_t>(300, 0, 9, 9);
  std::vector<Payload> values;
  for (size_t i = 0; i < keys.size(); ++i)
    values.push_back(Payload{int32_t(i), double(i) / 3, {char('a' + i % 26), 'x', 0}});
  std::vector<Payload> out;
  sort_pairs(keys, out, 0, 32, false, values);
  const auto order = stable_order(keys, std::less<uint32_t>());
  ASSERT_EQ(out.size(), order.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const Payload& want = values[size_t(order[i])];
    EXPECT_EQ(out[i].a, want.a);
    EXPECT_EQ(out[i].b, want.b);
    EXPECT_STREQ(out[i].tag, want.tag);
  }
}

// ---- temporary storage ----

TEST_F(RadixSort, NoItemsAndOneItem) {
  size_t bytes = 0;
  int32_t* keys = to_device(std::vector<int32_t>{42, 43});
  int32_t* out = to_device(std::vector<int32_t>{-7, -8});
  ASSERT_EQ(cub::DeviceRadixSort::SortKeys(nullptr, bytes, keys, out, 0, 0, 32, stream), cudaSuccess);
  EXPECT_GT(bytes, 0u) << "cub asks for at least a byte";
  ASSERT_EQ(cub::DeviceRadixSort::SortKeys(device_bytes(bytes), bytes, keys, out, 0, 0, 32, stream), cudaSuccess);
  EXPECT_EQ(to_host(out, 2), (std::vector<int32_t>{-7, -8})) << "nothing is written";
  std::vector<int32_t> values;
  EXPECT_EQ(sort_pairs(std::vector<int32_t>{-3}, values), std::vector<int32_t>{-3});
  EXPECT_EQ(values, std::vector<int32_t>{0});
}

TEST_F(RadixSort, TheSizeQueryRunsNothingAndGrowsWithTheItems) {
  const auto keys = random_keys<int32_t>(1000, 0, 9, 10);
  int32_t* in = to_device(keys);
  int32_t* out = static_cast<int32_t*>(device_bytes(keys.size() * sizeof(int32_t)));
  std::atomic<bool> go{false};
  ASSERT_EQ(cudaLaunchHostFunc(stream, wait_for_flag, &go), cudaSuccess);
  size_t small = 0, large = 0;
  ASSERT_EQ(cub::DeviceRadixSort::SortKeys(nullptr, small, in, out, 10, 0, 32, stream), cudaSuccess);
  ASSERT_EQ(cub::DeviceRadixSort::SortKeys(nullptr, large, in, out, 1000, 0, 32, stream), cudaSuccess);
  EXPECT_GT(large, small);
  go = true;
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const auto untouched = to_host(out, keys.size());
  EXPECT_TRUE(std::all_of(untouched.begin(), untouched.end(), [](int32_t v) { return v == -1; }))
      << "cudaMalloc's fill (0xFF bytes) is still there";
}

TEST_F(RadixSort, TooLittleTemporaryStorageIsInvalid) {
  const auto keys = random_keys<int32_t>(500, 0, 99, 11);
  int32_t* in = to_device(keys);
  int32_t* out = to_device(std::vector<int32_t>(keys.size(), 5));
  size_t bytes = 0;
  ASSERT_EQ(cub::DeviceRadixSort::SortKeys(nullptr, bytes, in, out, int(keys.size()), 0, 32, stream), cudaSuccess);
  size_t short_bytes = bytes - 1;
  EXPECT_EQ(cub::DeviceRadixSort::SortKeys(device_bytes(bytes), short_bytes, in, out, int(keys.size()), 0, 32, stream),
            cudaErrorInvalidValue);
  EXPECT_EQ(to_host(out, keys.size()), std::vector<int32_t>(keys.size(), 5)) << "nothing ran";
}

TEST_F(RadixSort, TheSortWorksInItsTemporaryStorage) {
  const auto keys = random_keys<int32_t>(700, -9, 9, 12);
  int32_t* in = to_device(keys);
  int32_t* out = to_device(keys);
  size_t bytes = 0;
  ASSERT_EQ(cub::DeviceRadixSort::SortKeys(nullptr, bytes, in, out, int(keys.size()), 0, 32, stream), cudaSuccess);
  auto* temp = static_cast<unsigned char*>(device_bytes(bytes));
  ASSERT_EQ(cudaMemset(temp, 0, bytes), cudaSuccess);
  ASSERT_EQ(cub::DeviceRadixSort::SortKeys(temp, bytes, in, out, int(keys.size()), 0, 32, stream), cudaSuccess);
  const auto after = to_host(temp, bytes);
  EXPECT_GT(std::count_if(after.begin(), after.end(), [](unsigned char c) { return c != 0; }), long(keys.size()))
      << "the transformed keys and the permutation are kept there";
}

TEST_F(RadixSort, BitRangesOutsideTheKeyAreInvalid) {
  int32_t* keys = to_device(std::vector<int32_t>{3, 1, 2});
  size_t bytes = 0;
  EXPECT_EQ(cub::DeviceRadixSort::SortKeys(nullptr, bytes, keys, keys, 3, 0, 33, stream), cudaErrorInvalidValue);
  EXPECT_EQ(cub::DeviceRadixSort::SortKeys(nullptr, bytes, keys, keys, 3, 9, 8, stream), cudaErrorInvalidValue);
  EXPECT_EQ(cub::DeviceRadixSort::SortKeys(nullptr, bytes, keys, keys, 3, -1, 8, stream), cudaErrorInvalidValue);
  EXPECT_EQ(cub::DeviceRadixSort::SortKeys(nullptr, bytes, keys, keys, -3, 0, 32, stream), cudaErrorInvalidValue);
}

// ---- streams ----

TEST_F(RadixSort, TheSortRunsInStreamOrder) {
  const auto keys = random_keys<int32_t>(1000, 0, 30, 13);
  const auto positions = stable_order(keys, std::less<int32_t>());
  int32_t* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, keys.size() * sizeof(int32_t)), cudaSuccess);
  std::memcpy(pinned, keys.data(), keys.size() * sizeof(int32_t));
  auto* in = static_cast<int32_t*>(device_bytes(keys.size() * sizeof(int32_t)));
  int32_t* out = to_device(keys);
  std::vector<int32_t> iota(keys.size());
  std::iota(iota.begin(), iota.end(), 0);
  int32_t* values_in = to_device(iota);
  int32_t* values_out = to_device(iota);
  size_t bytes = 0;
  const int n = int(keys.size());
  ASSERT_EQ(cub::DeviceRadixSort::SortPairs(nullptr, bytes, in, out, values_in, values_out, n, 0, 32, stream),
            cudaSuccess);
  void* temp = device_bytes(bytes);
  std::atomic<bool> go{false};
  ASSERT_EQ(cudaLaunchHostFunc(stream, wait_for_flag, &go), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(in, pinned, keys.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream), cudaSuccess);
  ASSERT_EQ(cub::DeviceRadixSort::SortPairs(temp, bytes, in, out, values_in, values_out, n, 0, 32, stream),
            cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(stream), cudaErrorNotReady) << "the sort is queued, not run";
  go = true;
  EXPECT_EQ(to_host(values_out, keys.size()), positions);
  EXPECT_EQ(to_host(out, keys.size()), gather(keys, positions));
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
}

// ---- faults ----

TEST_F(RadixSortFault, PageableKeysAreAnIllegalAddress) {
  use_device(6);
  std::vector<int32_t> host_keys = {5, 3, 4};
  int32_t* out = to_device(std::vector<int32_t>{0, 0, 0});
  size_t bytes = 0;
  ASSERT_EQ(cub::DeviceRadixSort::SortKeys(nullptr, bytes, host_keys.data(), out, 3, 0, 32, stream), cudaSuccess);
  ASSERT_EQ(cub::DeviceRadixSort::SortKeys(device_bytes(bytes), bytes, host_keys.data(), out, 3, 0, 32, stream),
            cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
  expected_sync = cudaErrorIllegalAddress;
}

TEST_F(RadixSortFault, TemporaryStoragePastItsAllocationIsAnIllegalAddress) {
  use_device(5);
  const auto keys = random_keys<int32_t>(100, 0, 9, 14);
  int32_t* in = to_device(keys);
  int32_t* out = to_device(keys);
  size_t bytes = 0;
  ASSERT_EQ(cub::DeviceRadixSort::SortKeys(nullptr, bytes, in, out, 100, 0, 32, stream), cudaSuccess);
  // Claims the size it was asked for, but the allocation is shorter.
  ASSERT_EQ(cub::DeviceRadixSort::SortKeys(device_bytes(bytes / 2), bytes, in, out, 100, 0, 32, stream), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaErrorIllegalAddress);
  expected_sync = cudaErrorIllegalAddress;
}

}  // namespace
