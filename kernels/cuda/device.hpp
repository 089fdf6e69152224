#pragma once
// CUDA device discovery, callable from host C++ that is compiled without nvcc.
// Only present in a CUDA build (TRIDENT_HAVE_CUDA).
#include <string>

namespace trident::cuda {

// Number of usable GPUs; 0 when there is no driver or no device (any CUDA error means "none":
// without a driver cudaGetDeviceCount reports error 35, not "no device").
int device_count();

// Binds this process to GPU `index` (cudaSetDevice); throws trident::Error naming the CUDA error.
void set_device(int index);

// "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)" for the current device.
std::string device_description();

}  // namespace trident::cuda
