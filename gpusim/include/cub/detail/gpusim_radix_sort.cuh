#pragma once
// gpu-sim's radix sort, behind cub::DeviceRadixSort (cub/device/device_radix_sort.cuh): the temporary
// storage protocol, the key transformations cub documents, and the sort queued on a stream.
//
// Keys are ordered as cub orders them: by their bits after cub's transformation (unsigned as they
// are; signed with the sign bit flipped, so negatives come first; floating point with the sign bit
// flipped if positive and every bit flipped if negative; then every bit flipped for a descending sort;
// -0.0 and +0.0 equal), of which only bits [begin_bit, end_bit) count. The sort is stable: keys equal
// in those bits keep their input order. It works in the caller's temporary storage as a GPU sort does:
// the transformed keys and the permutation live there, and the output keys are rebuilt from them, so
// temporary storage released or reused before the sort has run corrupts the result.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>

#include "gpusim/driver_types.h"
#include "gpusim/runtime.hpp"

namespace gpusim::radix {

template <size_t Bytes>
struct UnsignedOfSize;
template <>
struct UnsignedOfSize<1> {
  using type = uint8_t;
};
template <>
struct UnsignedOfSize<2> {
  using type = uint16_t;
};
template <>
struct UnsignedOfSize<4> {
  using type = uint32_t;
};
template <>
struct UnsignedOfSize<8> {
  using type = uint64_t;
};

template <class Key>
struct KeyTraits {
  static_assert((std::is_integral_v<Key> && !std::is_same_v<Key, bool>) || std::is_same_v<Key, float> ||
                    std::is_same_v<Key, double>,
                "gpu-sim's cub::DeviceRadixSort sorts integral, float and double keys");
  using Bits = typename UnsignedOfSize<sizeof(Key)>::type;
  static constexpr int kBits = int(sizeof(Key) * 8);
  static constexpr Bits kHigh = Bits(Bits(1) << (kBits - 1));

  static Bits twiddle_in(Bits b) {
    if constexpr (std::is_floating_point_v<Key>)
      return (b & kHigh) ? Bits(~b) : Bits(b | kHigh);
    else if constexpr (std::is_signed_v<Key>)
      return Bits(b ^ kHigh);
    else
      return b;
  }
  static Bits twiddle_out(Bits b) {
    if constexpr (std::is_floating_point_v<Key>)
      return (b & kHigh) ? Bits(b ^ kHigh) : Bits(~b);
    else if constexpr (std::is_signed_v<Key>)
      return Bits(b ^ kHigh);
    else
      return b;
  }
  // What the sort compares, from twiddled bits: cub inverts for a descending sort, then makes -0.0
  // (twiddled: ~kHigh) equal to +0.0 (twiddled: kHigh), then takes the bit range.
  static Bits order(Bits twiddled, bool descending, Bits mask) {
    Bits key = descending ? Bits(~twiddled) : twiddled;
    if constexpr (std::is_floating_point_v<Key>) {
      if (key == Bits(~kHigh)) key = kHigh;
    }
    return Bits(key & mask);
  }
  static Bits mask(int begin_bit, int end_bit) {
    const int width = end_bit - begin_bit;
    if (width == 0) return 0;
    const uint64_t low = width >= 64 ? ~uint64_t(0) : (uint64_t(1) << width) - 1;
    return Bits(low << begin_bit);
  }
};

// The value type of a keys-only sort (its arrays are null).
struct NoValue {};

constexpr size_t kTempAlignment = 256;  // as cub: each part of the temporary storage 256-byte aligned

inline size_t align_up(size_t x) { return (x + kTempAlignment - 1) / kTempAlignment * kTempAlignment; }

// Temporary storage: the transformed keys, then the permutation, with slack to align the start.
template <class Key, class Offset>
size_t temp_bytes_for(uint64_t n) {
  return align_up(n * sizeof(typename KeyTraits<Key>::Bits)) + n * sizeof(Offset) + kTempAlignment - 1;
}

// The sort as queued on the stream; values_in/values_out are null for a keys-only sort.
template <class Key, class Value, class Offset>
struct SortJob {
  using Traits = KeyTraits<Key>;
  using Bits = typename Traits::Bits;
  const char* what;
  const Key* keys_in;
  Key* keys_out;
  const Value* values_in;
  Value* values_out;
  uint64_t n;
  int begin_bit, end_bit;
  bool descending;
  void* temp;
  size_t temp_bytes;  // what the sort uses of it

  bool accessible(const char* name, const void* p, size_t bytes) const {
    if (gpusim::device_accessible(p, bytes)) return true;
    char where[32];
    std::snprintf(where, sizeof where, "%p", p);
    gpusim::device_fault(cudaErrorIllegalAddress, std::string(name) + " [" + where + ", +" + std::to_string(bytes) +
                                                      " bytes) is not device memory or page-locked host memory");
    return false;
  }

  bool operands_accessible() const {
    const bool values = values_in || values_out;
    return accessible("d_keys_in", keys_in, n * sizeof(Key)) && accessible("d_keys_out", keys_out, n * sizeof(Key)) &&
           (!values || accessible("d_values_in", values_in, n * sizeof(Value))) &&
           (!values || accessible("d_values_out", values_out, n * sizeof(Value))) &&
           accessible("d_temp_storage", temp, temp_bytes);
  }

  void operator()() const {
    if (!operands_accessible()) return;
    auto* bits = reinterpret_cast<Bits*>(align_up(reinterpret_cast<uintptr_t>(temp)));
    auto* index = reinterpret_cast<Offset*>(reinterpret_cast<char*>(bits) + align_up(n * sizeof(Bits)));
    for (uint64_t i = 0; i < n; ++i) {
      Bits b;
      std::memcpy(&b, keys_in + i, sizeof b);
      bits[i] = Traits::twiddle_in(b);
      index[i] = Offset(i);
    }
    const Bits mask = Traits::mask(begin_bit, end_bit);
    const bool desc = descending;
    std::stable_sort(index, index + n, [bits, mask, desc](Offset x, Offset y) {
      return Traits::order(bits[x], desc, mask) < Traits::order(bits[y], desc, mask);
    });
    for (uint64_t i = 0; i < n; ++i) {
      const Bits b = Traits::twiddle_out(bits[index[i]]);
      std::memcpy(keys_out + i, &b, sizeof b);
      if (values_out) values_out[i] = values_in[index[i]];
    }
  }
};

inline cudaError_t invalid(const char* what, const std::string& why) {
  std::fprintf(stderr, "gpu-sim cub: %s: %s (cudaErrorInvalidValue)\n", what, why.c_str());
  return cudaErrorInvalidValue;
}

// cub's protocol: d_temp_storage == nullptr asks for the size (written to temp_storage_bytes; nothing
// is queued); otherwise temp_storage_bytes must be at least that and the sort is queued on the stream.
// No items: the size is 1 and nothing is queued. A bit range outside the key or a negative count is
// refused with cudaErrorInvalidValue (cub leaves them undefined).
template <class Key, class Value, class NumItems>
cudaError_t sort(const char* what, bool descending, void* d_temp_storage, size_t& temp_storage_bytes,
                 const Key* keys_in, Key* keys_out, const Value* values_in, Value* values_out, NumItems num_items,
                 int begin_bit, int end_bit, cudaStream_t stream) {
  static_assert(std::is_integral_v<NumItems> && !std::is_same_v<NumItems, bool>, "num_items must be an integer");
  static_assert(std::is_trivially_copyable_v<Value>, "values must be trivially copyable");
  using Offset = std::conditional_t<(sizeof(NumItems) <= 4), uint32_t, uint64_t>;  // cub's choose_offset_t
  if constexpr (std::is_signed_v<NumItems>) {
    if (num_items < 0) return invalid(what, "negative num_items");
  }
  if (begin_bit < 0 || begin_bit > end_bit || end_bit > KeyTraits<Key>::kBits)
    return invalid(what, "bit range [" + std::to_string(begin_bit) + ", " + std::to_string(end_bit) +
                             ") is not within the key's [0, " + std::to_string(KeyTraits<Key>::kBits) + ")");
  const auto n = uint64_t(num_items);
  if (n == 0) {
    if (!d_temp_storage) temp_storage_bytes = 1;
    return cudaSuccess;
  }
  const size_t need = temp_bytes_for<Key, Offset>(n);
  if (!d_temp_storage) {
    temp_storage_bytes = need;
    return cudaSuccess;
  }
  if (temp_storage_bytes < need)
    return invalid(what, "temp_storage_bytes " + std::to_string(temp_storage_bytes) + " < the " + std::to_string(need) +
                             " bytes the sort needs");
  return gpusim::enqueue(stream, what,
                         SortJob<Key, Value, Offset>{what, keys_in, keys_out, values_in, values_out, n, begin_bit,
                                                     end_bit, descending, d_temp_storage, need});
}

}  // namespace gpusim::radix
