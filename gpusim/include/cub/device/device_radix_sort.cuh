#pragma once
// gpu-sim's cub/device/device_radix_sort.cuh: cub::DeviceRadixSort's pointer forms (SortPairs,
// SortPairsDescending, SortKeys, SortKeysDescending) with cub's signatures and temporary-storage
// protocol, run on the stream's worker (cub/detail/gpusim_radix_sort.cuh says how). Keys: integral
// types, float and double; values: any trivially copyable type. The DoubleBuffer forms and custom
// decomposers are not simulated (they fail to compile).
#include <cstddef>

#include "cub/detail/gpusim_radix_sort.cuh"
#include "gpusim/driver_types.h"

namespace cub {

struct DeviceRadixSort {
  template <typename KeyT, typename ValueT, typename NumItemsT>
  static cudaError_t SortPairs(void* d_temp_storage, size_t& temp_storage_bytes, const KeyT* d_keys_in,
                               KeyT* d_keys_out, const ValueT* d_values_in, ValueT* d_values_out, NumItemsT num_items,
                               int begin_bit = 0, int end_bit = sizeof(KeyT) * 8, cudaStream_t stream = 0) {
    return gpusim::radix::sort("cub::DeviceRadixSort::SortPairs", false, d_temp_storage, temp_storage_bytes, d_keys_in,
                               d_keys_out, d_values_in, d_values_out, num_items, begin_bit, end_bit, stream);
  }

  template <typename KeyT, typename ValueT, typename NumItemsT>
  static cudaError_t SortPairsDescending(void* d_temp_storage, size_t& temp_storage_bytes, const KeyT* d_keys_in,
                                         KeyT* d_keys_out, const ValueT* d_values_in, ValueT* d_values_out,
                                         NumItemsT num_items, int begin_bit = 0, int end_bit = sizeof(KeyT) * 8,
                                         cudaStream_t stream = 0) {
    return gpusim::radix::sort("cub::DeviceRadixSort::SortPairsDescending", true, d_temp_storage, temp_storage_bytes,
                               d_keys_in, d_keys_out, d_values_in, d_values_out, num_items, begin_bit, end_bit, stream);
  }

  template <typename KeyT, typename NumItemsT>
  static cudaError_t SortKeys(void* d_temp_storage, size_t& temp_storage_bytes, const KeyT* d_keys_in, KeyT* d_keys_out,
                              NumItemsT num_items, int begin_bit = 0, int end_bit = sizeof(KeyT) * 8,
                              cudaStream_t stream = 0) {
    using NoValue = gpusim::radix::NoValue;
    return gpusim::radix::sort("cub::DeviceRadixSort::SortKeys", false, d_temp_storage, temp_storage_bytes, d_keys_in,
                               d_keys_out, static_cast<const NoValue*>(nullptr), static_cast<NoValue*>(nullptr),
                               num_items, begin_bit, end_bit, stream);
  }

  template <typename KeyT, typename NumItemsT>
  static cudaError_t SortKeysDescending(void* d_temp_storage, size_t& temp_storage_bytes, const KeyT* d_keys_in,
                                        KeyT* d_keys_out, NumItemsT num_items, int begin_bit = 0,
                                        int end_bit = sizeof(KeyT) * 8, cudaStream_t stream = 0) {
    using NoValue = gpusim::radix::NoValue;
    return gpusim::radix::sort("cub::DeviceRadixSort::SortKeysDescending", true, d_temp_storage, temp_storage_bytes,
                               d_keys_in, d_keys_out, static_cast<const NoValue*>(nullptr),
                               static_cast<NoValue*>(nullptr), num_items, begin_bit, end_bit, stream);
  }
};

}  // namespace cub
