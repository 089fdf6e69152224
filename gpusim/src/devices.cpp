// The simulated GPUs: GPUSIM_GPUS_PER_NODE H100 SXM5 80GB devices per node, of which
// CUDA_VISIBLE_DEVICES picks and orders the visible ones (indices or UUIDs, as CUDA reads it: the list
// ends at the first entry that names no device). Each host thread has its current device, 0 at first.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>

#include "gpusim/runtime.hpp"
#include "cuda_runtime.h"
#include "state.hpp"

namespace gpusim {
namespace {

thread_local int t_current = 0;

// PCI bus numbers of the eight GPUs of an HGX H100 board.
constexpr int kPciBus[8] = {0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb};
constexpr size_t kH100Memory = size_t(81559) << 20;  // 79.6 GiB, as an H100 80GB reports

std::string host_name() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

// The same physical GPU has the same UUID in every process of the node.
void fill_uuid(cudaUUID_t& uuid, int physical) {
  const std::string key = host_name() + "/gpu-sim/" + std::to_string(physical);
  const size_t h1 = std::hash<std::string>{}(key), h2 = std::hash<std::string>{}(key + "#");
  std::memcpy(uuid.bytes, &h1, 8);
  std::memcpy(uuid.bytes + 8, &h2, 8);
}

cudaDeviceProp h100(int physical) {
  cudaDeviceProp p{};
  std::snprintf(p.name, sizeof p.name, "gpu-sim NVIDIA H100 80GB HBM3");
  fill_uuid(p.uuid, physical);
  p.totalGlobalMem = config().memory_bytes ? config().memory_bytes : kH100Memory;
  p.sharedMemPerBlock = 48 << 10;
  p.sharedMemPerBlockOptin = 227 << 10;
  p.sharedMemPerMultiprocessor = 228 << 10;
  p.reservedSharedMemPerBlock = 1 << 10;
  p.regsPerBlock = 65536;
  p.regsPerMultiprocessor = 65536;
  p.warpSize = 32;
  p.maxThreadsPerBlock = 1024;
  p.maxThreadsDim[0] = 1024;
  p.maxThreadsDim[1] = 1024;
  p.maxThreadsDim[2] = 64;
  p.maxGridSize[0] = 2147483647;
  p.maxGridSize[1] = 65535;
  p.maxGridSize[2] = 65535;
  p.totalConstMem = 65536;
  p.major = 9;
  p.minor = 0;
  p.multiProcessorCount = 132;
  p.concurrentKernels = 1;
  p.ECCEnabled = 1;
  p.pciDomainID = 0;
  p.pciBusID = kPciBus[physical % 8] + physical / 8;
  p.pciDeviceID = 0;
  p.asyncEngineCount = 3;
  p.unifiedAddressing = 1;
  p.memoryBusWidth = 5120;
  p.l2CacheSize = 50 << 20;
  p.maxThreadsPerMultiProcessor = 2048;
  p.managedMemory = 1;
  p.maxBlocksPerMultiProcessor = 32;
  return p;
}

std::string uuid_text(const cudaUUID_t& u) {
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  char s[64];
  std::snprintf(s, sizeof s, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return s;
}

// One CUDA_VISIBLE_DEVICES entry: an index, or a (prefix of a) UUID; -1 when it names no device.
int physical_of(const std::string& entry, int count) {
  if (entry.rfind("GPU-", 0) == 0) {
    for (int i = 0; i < count; ++i)
      if (uuid_text(h100(i).uuid).rfind(entry, 0) == 0) return i;
    return -1;
  }
  char* end = nullptr;
  const long i = std::strtol(entry.c_str(), &end, 10);
  return (!entry.empty() && *end == '\0' && i >= 0 && i < count) ? int(i) : -1;
}

std::vector<int> visible_physical() {
  const int count = config().gpus_per_node;
  std::vector<int> out;
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  if (!v) {
    for (int i = 0; i < count; ++i) out.push_back(i);
    return out;
  }
  std::stringstream list(v);
  std::string entry;
  while (std::getline(list, entry, ',')) {
    const int p = physical_of(entry, count);
    if (p < 0 || std::find(out.begin(), out.end(), p) != out.end()) break;
    out.push_back(p);
  }
  return out;
}

Machine* make_machine() {
  auto* m = new Machine;  // never destroyed: worker threads may outlive main()
  const std::vector<int> visible = visible_physical();
  for (size_t i = 0; i < visible.size(); ++i) {
    auto* d = new Device;
    d->ordinal = int(i);
    d->physical = visible[i];
    d->prop = h100(visible[i]);
    m->devices.push_back(d);
  }
  return m;
}

Device* device_at(int ordinal) {
  Machine& m = machine();
  return ordinal >= 0 && ordinal < int(m.devices.size()) ? m.devices[size_t(ordinal)] : nullptr;
}

}  // namespace

Machine& machine() {
  static Machine* m = make_machine();
  return *m;
}

Device* current_device() { return device_at(t_current); }

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace gpusim

using gpusim::Device;

extern "C" {

cudaError_t cudaDriverGetVersion(int* version) {
  if (!version) return gpusim::record_error(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) { return cudaDriverGetVersion(version); }

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return gpusim::record_error(cudaErrorInvalidValue);
  *count = int(gpusim::machine().devices.size());
  return *count == 0 ? gpusim::record_error(cudaErrorNoDevice) : cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (!gpusim::device_at(device))
    return gpusim::record_error(gpusim::machine().devices.empty() ? cudaErrorNoDevice : cudaErrorInvalidDevice);
  gpusim::t_current = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (!device) return gpusim::record_error(cudaErrorInvalidValue);
  if (!gpusim::current_device()) return gpusim::record_error(cudaErrorNoDevice);
  *device = gpusim::t_current;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  Device* d = gpusim::device_at(device);
  if (!prop) return gpusim::record_error(cudaErrorInvalidValue);
  if (!d) return gpusim::record_error(cudaErrorInvalidDevice);
  *prop = d->prop;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  Device* d = gpusim::device_at(device);
  if (!value) return gpusim::record_error(cudaErrorInvalidValue);
  if (!d) return gpusim::record_error(cudaErrorInvalidDevice);
  const cudaDeviceProp& p = d->prop;
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxBlockDimX: *value = p.maxThreadsDim[0]; break;
    case cudaDevAttrMaxBlockDimY: *value = p.maxThreadsDim[1]; break;
    case cudaDevAttrMaxBlockDimZ: *value = p.maxThreadsDim[2]; break;
    case cudaDevAttrMaxGridDimX: *value = p.maxGridSize[0]; break;
    case cudaDevAttrMaxGridDimY: *value = p.maxGridSize[1]; break;
    case cudaDevAttrMaxGridDimZ: *value = p.maxGridSize[2]; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = int(p.sharedMemPerBlock); break;
    case cudaDevAttrTotalConstantMemory: *value = int(p.totalConstMem); break;
    case cudaDevAttrWarpSize: *value = p.warpSize; break;
    case cudaDevAttrMaxRegistersPerBlock: *value = p.regsPerBlock; break;
    case cudaDevAttrClockRate: *value = 1980000; break;  // kHz: the H100 SXM5's boost clock
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrConcurrentKernels: *value = p.concurrentKernels; break;
    case cudaDevAttrPciBusId: *value = p.pciBusID; break;
    case cudaDevAttrPciDeviceId: *value = p.pciDeviceID; break;
    case cudaDevAttrMemoryClockRate: *value = 2619000; break;
    case cudaDevAttrGlobalMemoryBusWidth: *value = p.memoryBusWidth; break;
    case cudaDevAttrL2CacheSize: *value = p.l2CacheSize; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = p.maxThreadsPerMultiProcessor; break;
    case cudaDevAttrUnifiedAddressing: *value = p.unifiedAddressing; break;
    case cudaDevAttrPciDomainId: *value = p.pciDomainID; break;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = int(p.sharedMemPerMultiprocessor); break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = int(p.sharedMemPerBlockOptin); break;
    default: return gpusim::record_error(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* pciBusId, int len, int device) {
  Device* d = gpusim::device_at(device);
  if (!pciBusId || len <= 0) return gpusim::record_error(cudaErrorInvalidValue);
  if (!d) return gpusim::record_error(cudaErrorInvalidDevice);
  std::snprintf(pciBusId, size_t(len), "%08X:%02X:%02X.0", d->prop.pciDomainID, d->prop.pciBusID,
                d->prop.pciDeviceID);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  Device* d = gpusim::current_device();
  if (!free || !total) return gpusim::record_error(cudaErrorInvalidValue);
  if (!d) return gpusim::record_error(cudaErrorNoDevice);
  if (d->sticky) return gpusim::record_error(cudaError_t(d->sticky.load()));
  *total = d->prop.totalGlobalMem;
  *free = *total - std::min(*total, d->allocated.load());
  return cudaSuccess;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  if (leastPriority) *leastPriority = 0;
  if (greatestPriority) *greatestPriority = -5;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  Device* d = gpusim::current_device();
  if (!d) return gpusim::record_error(cudaErrorNoDevice);
  return gpusim::record_error(gpusim::wait_device(d));
}

}  // extern "C"
