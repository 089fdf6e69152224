// Device and page-locked memory, and copies. Device memory is host memory from the allocator, sized
// exactly as requested (so AddressSanitizer sees a read past its end), filled with 0xFF bytes (NaN as
// float or double, -1 as an integer) so that reading what was never written shows. A registry of
// every allocation tells device memory, page-locked host memory and pageable memory apart: copies are
// checked against the direction they claim, and a copy from or to pageable memory synchronises as on
// a GPU (the stream's earlier work first, then the copy, before the call returns).
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>

#include "cuda_runtime.h"
#include "gpusim/runtime.hpp"
#include "state.hpp"

namespace gpusim {
namespace {

enum class Kind { Device, Pinned, Registered };

struct Allocation {
  uintptr_t start = 0;
  size_t size = 0;
  Kind kind = Kind::Device;
  Device* device = nullptr;
};

struct Registry {
  std::mutex lock;
  std::map<uintptr_t, Allocation> by_start;
};

Registry& registry() {
  static auto* r = new Registry;  // never destroyed (worker threads may outlive main)
  return *r;
}

// The allocation holding [p, p + bytes), if one does.
std::optional<Allocation> find(const void* p, size_t bytes) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  Registry& r = registry();
  std::lock_guard lock(r.lock);
  auto it = r.by_start.upper_bound(a);
  if (it == r.by_start.begin()) return std::nullopt;
  --it;
  const Allocation& x = it->second;
  if (a + bytes > x.start + x.size || a + bytes < a) return std::nullopt;
  return x;
}

std::optional<Allocation> find_start(const void* p, Kind kind) {
  Registry& r = registry();
  std::lock_guard lock(r.lock);
  auto it = r.by_start.find(reinterpret_cast<uintptr_t>(p));
  if (it == r.by_start.end() || it->second.kind != kind) return std::nullopt;
  return it->second;
}

bool overlaps(uintptr_t start, size_t size) {
  Registry& r = registry();
  std::lock_guard lock(r.lock);
  auto it = r.by_start.lower_bound(start + size);
  if (it == r.by_start.begin()) return false;
  --it;
  return it->second.start + it->second.size > start;
}

void add(const Allocation& a) {
  Registry& r = registry();
  std::lock_guard lock(r.lock);
  r.by_start[a.start] = a;
}

void remove(uintptr_t start) {
  Registry& r = registry();
  std::lock_guard lock(r.lock);
  r.by_start.erase(start);
}

bool is_device(const void* p, size_t bytes) {
  auto a = find(p, bytes);
  return a && a->kind == Kind::Device;
}

bool is_page_locked(const void* p, size_t bytes) {
  auto a = find(p, bytes);
  return a && a->kind != Kind::Device;
}

// Any registered allocation touching p (to tell "device memory, but the range overruns it" apart).
bool inside_device_allocation(const void* p) {
  auto a = find(p, 1);
  return a && a->kind == Kind::Device;
}

cudaError_t device_malloc(void** ptr, size_t size) {
  Device* d = current_device();
  if (!ptr) return record_error(cudaErrorInvalidValue);
  if (!d) return record_error(cudaErrorNoDevice);
  if (d->sticky) return record_error(cudaError_t(d->sticky.load()));
  *ptr = nullptr;
  if (size == 0) return cudaSuccess;
  if (d->allocated + size > d->prop.totalGlobalMem) return record_error(cudaErrorMemoryAllocation);
  void* p = nullptr;
  if (posix_memalign(&p, 256, size) != 0) return record_error(cudaErrorMemoryAllocation);
  std::memset(p, 0xFF, size);
  add(Allocation{reinterpret_cast<uintptr_t>(p), size, Kind::Device, d});
  d->allocated += size;
  *ptr = p;
  return cudaSuccess;
}

void device_release(const Allocation& a) {
  remove(a.start);
  a.device->allocated -= a.size;
  std::free(reinterpret_cast<void*>(a.start));
}

cudaError_t host_alloc(void** ptr, size_t size) {
  if (!ptr) return record_error(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (size == 0) return cudaSuccess;
  void* p = nullptr;
  if (posix_memalign(&p, 4096, size) != 0) return record_error(cudaErrorMemoryAllocation);
  add(Allocation{reinterpret_cast<uintptr_t>(p), size, Kind::Pinned, current_device()});
  *ptr = p;
  return cudaSuccess;
}

// What a copy of `count` bytes claiming `kind` really does, checked against the registry.
struct CopyPlan {
  cudaError_t error = cudaSuccess;
  bool from_device = false, to_device = false;
};

CopyPlan plan_copy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  CopyPlan c;
  if (kind == cudaMemcpyDefault) {
    c.from_device = is_device(src, count);
    c.to_device = is_device(dst, count);
  } else if (kind >= cudaMemcpyHostToHost && kind <= cudaMemcpyDeviceToDevice) {
    c.from_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    c.to_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  } else {
    c.error = cudaErrorInvalidMemcpyDirection;
    return c;
  }
  // Each side must be what the kind says: device memory for its whole range, or not device memory.
  const bool src_ok = c.from_device ? is_device(src, count) : !inside_device_allocation(src);
  const bool dst_ok = c.to_device ? is_device(dst, count) : !inside_device_allocation(dst);
  if (!src_ok || !dst_ok) c.error = cudaErrorInvalidValue;
  return c;
}

cudaError_t copy(void* dst, const void* src, size_t count, cudaMemcpyKind kind, Stream* s) {
  const CopyPlan c = plan_copy(dst, src, count, kind);
  if (c.error != cudaSuccess) return record_error(c.error);
  if (count == 0) return cudaSuccess;
  const bool pageable_side = (!c.from_device && !is_page_locked(src, count)) ||
                             (!c.to_device && !is_page_locked(dst, count));
  if (pageable_side) {
    // Pageable host memory: the copy happens now, after the stream's earlier work.
    if (cudaError_t e = wait_stream(s); e != cudaSuccess) return record_error(e);
    std::memcpy(dst, src, count);
    return cudaSuccess;
  }
  return enqueue(reinterpret_cast<cudaStream_t>(s), "cudaMemcpyAsync", [dst, src, count] { std::memcpy(dst, src, count); });
}

cudaError_t memset_on(void* p, int value, size_t count, Stream* s) {
  if (count == 0) return cudaSuccess;
  if (!is_device(p, count)) return record_error(cudaErrorInvalidValue);
  return enqueue(reinterpret_cast<cudaStream_t>(s), "cudaMemsetAsync", [p, value, count] { std::memset(p, value, count); });
}

}  // namespace

bool device_accessible(const void* p, size_t bytes) { return find(p, bytes).has_value(); }

}  // namespace gpusim

using gpusim::Allocation;
using gpusim::Kind;

extern "C" {

cudaError_t cudaMalloc(void** devPtr, size_t size) { return gpusim::device_malloc(devPtr, size); }

// Waits for the device (as cudaFree does), then frees.
cudaError_t cudaFree(void* devPtr) {
  if (!devPtr) return cudaSuccess;
  auto a = gpusim::find_start(devPtr, Kind::Device);
  if (!a) return gpusim::record_error(cudaErrorInvalidValue);
  gpusim::wait_device(a->device);
  gpusim::device_release(*a);
  return cudaSuccess;
}

cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t stream) {
  if (!gpusim::resolve(stream)) return gpusim::record_error(cudaErrorInvalidResourceHandle);
  return gpusim::device_malloc(devPtr, size);
}

// Stream-ordered: the memory is released when the stream reaches this point.
cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t stream) {
  if (!devPtr) return cudaSuccess;
  auto a = gpusim::find_start(devPtr, Kind::Device);
  if (!a) return gpusim::record_error(cudaErrorInvalidValue);
  return gpusim::enqueue(stream, "cudaFreeAsync", [a = *a] { gpusim::device_release(a); });
}

cudaError_t cudaMallocHost(void** ptr, size_t size) { return gpusim::host_alloc(ptr, size); }

cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int) { return gpusim::host_alloc(ptr, size); }

cudaError_t cudaFreeHost(void* ptr) {
  if (!ptr) return cudaSuccess;
  auto a = gpusim::find_start(ptr, Kind::Pinned);
  if (!a) return gpusim::record_error(cudaErrorInvalidValue);
  gpusim::wait_all_devices();  // queued copies may still read or write it
  gpusim::remove(a->start);
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int) {
  if (!ptr || size == 0) return gpusim::record_error(cudaErrorInvalidValue);
  const auto start = reinterpret_cast<uintptr_t>(ptr);
  if (gpusim::overlaps(start, size)) return gpusim::record_error(cudaErrorHostMemoryAlreadyRegistered);
  gpusim::add(Allocation{start, size, Kind::Registered, gpusim::current_device()});
  return cudaSuccess;
}

cudaError_t cudaHostUnregister(void* ptr) {
  auto a = gpusim::find_start(ptr, Kind::Registered);
  if (!a) return gpusim::record_error(cudaErrorHostMemoryNotRegistered);
  gpusim::wait_all_devices();
  gpusim::remove(a->start);
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  if (!attributes) return gpusim::record_error(cudaErrorInvalidValue);
  *attributes = cudaPointerAttributes{};
  auto a = gpusim::find(ptr, 0);
  if (!a) {
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = -2;
    attributes->hostPointer = const_cast<void*>(ptr);
    return cudaSuccess;
  }
  attributes->type = a->kind == Kind::Device ? cudaMemoryTypeDevice : cudaMemoryTypeHost;
  attributes->device = a->device ? a->device->ordinal : 0;
  attributes->devicePointer = const_cast<void*>(ptr);
  attributes->hostPointer = a->kind == Kind::Device ? nullptr : const_cast<void*>(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  gpusim::Stream* s = gpusim::resolve(stream);
  if (!s) return gpusim::record_error(cudaErrorInvalidResourceHandle);
  return gpusim::copy(dst, src, count, kind, s);
}

// On the legacy default stream, and waited for.
cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  gpusim::Stream* s = gpusim::resolve(nullptr);
  if (!s) return gpusim::record_error(cudaErrorNoDevice);
  if (cudaError_t e = gpusim::copy(dst, src, count, kind, s); e != cudaSuccess) return e;
  return gpusim::record_error(gpusim::wait_stream(s));
}

cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  gpusim::Stream* s = gpusim::resolve(stream);
  if (!s) return gpusim::record_error(cudaErrorInvalidResourceHandle);
  return gpusim::memset_on(devPtr, value, count, s);
}

cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  gpusim::Stream* s = gpusim::resolve(nullptr);
  if (!s) return gpusim::record_error(cudaErrorNoDevice);
  if (cudaError_t e = gpusim::memset_on(devPtr, value, count, s); e != cudaSuccess) return e;
  return gpusim::record_error(gpusim::wait_stream(s));
}

}  // extern "C"
