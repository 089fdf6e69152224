#include "cuda/device.hpp"

#include <cuda_runtime.h>

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
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s (sm_%d%d, %.1f GiB)", prop.name, prop.major, prop.minor,
                prop.totalGlobalMem / double(1 << 30));
  return buf;
}

}  // namespace trident::cuda
