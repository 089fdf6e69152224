#pragma once
// gpu-sim internals shared by the simulated libraries (cuBLASLt, cub, NCCL): how work is queued on a
// stream, how queued work reports a device fault, and how waits poll without spinning. Not part of
// the CUDA API; CUDA code never includes this.
#include <functional>
#include <string>

#include "gpusim/driver_types.h"

namespace gpusim {

// Queues `work` on `stream` (nullptr: the legacy default stream of the current device): it runs on the
// stream's worker thread after the stream's earlier work, as a kernel would. `what` names it in
// messages ("cublasLtMatmul", "ncclAllReduce"). Returns (and records as the calling thread's last
// error) cudaErrorInvalidResourceHandle for an unknown stream, or the device's sticky error.
cudaError_t enqueue(cudaStream_t stream, const char* what, std::function<void()> work);

// True when [p, p + bytes) lies inside one allocation the device can reach: cudaMalloc'd memory of any
// simulated device of this process, or page-locked host memory (cudaMallocHost, cudaHostRegister).
bool device_accessible(const void* p, size_t bytes);

// Called from inside queued work: the device has faulted (cudaErrorIllegalAddress for memory a kernel
// or library may not touch, cudaErrorLaunchFailure, ...). The error becomes the device's sticky error
// (every later call on the device returns it, and queued work is skipped) and `message` is printed
// once to stderr with the device and the work's name.
void device_fault(cudaError_t error, const std::string& message);

// Records `error` as the calling host thread's last error (cudaGetLastError) and returns it.
cudaError_t record_error(cudaError_t error);

// One step of a polling wait that does not keep a core busy (ranks often outnumber cores): yields at
// first, then sleeps up to 50 us. `round` counts the calls of one wait; start it at 0.
void poll_pause(int& round);

}  // namespace gpusim
