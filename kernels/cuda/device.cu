#include "cuda/device.hpp"

#include <cuda_runtime.h>

#include <cstdio>
#include <stdexcept>
#include <string>

namespace trident::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later calls are not confused by it
    return 0;
  }
  return n;
}

void set_device(int index) {
  cudaError_t err = cudaSetDevice(index);
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string("cudaSetDevice(") + std::to_string(index) + ") failed: " +
                             cudaGetErrorString(err));
  }
}

std::string device_description() {
  int dev = 0;
  cudaGetDevice(&dev);
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) return "unknown CUDA device";
  char buf[320];
  std::snprintf(buf, sizeof buf, "%s (sm_%d%d, %.1f GiB, PCI %04x:%02x:%02x.0)", prop.name, prop.major, prop.minor,
                prop.totalGlobalMem / double(1 << 30), prop.pciDomainID, prop.pciBusID, prop.pciDeviceID);
  return buf;
}

std::string device_uuid() {
  int dev = 0;
  cudaGetDevice(&dev);
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) return "GPU-unknown-" + std::to_string(dev);
  const auto* b = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
  char buf[64];
  std::snprintf(buf, sizeof buf, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return buf;
}

}  // namespace trident::cuda
