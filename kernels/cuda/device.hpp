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

// "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB, PCI 0000:19:00.0)" for the current device.
std::string device_description();

// The current device's UUID as nvidia-smi prints it ("GPU-1a2b3c4d-..."): the same physical GPU gives
// the same string in every process, whatever CUDA_VISIBLE_DEVICES numbers it.
std::string device_uuid();

}  // namespace trident::cuda
