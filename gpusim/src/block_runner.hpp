#pragma once
// Runs one thread block: every thread of the block is a fiber (Boost.Context) on the calling host
// thread; a fiber runs until it reaches a barrier, a warp operation or its end, then the next ready
// one runs. __syncthreads releases when every thread that has not exited has arrived; a warp
// operation (shuffle, vote, __syncwarp) when every lane of its mask has arrived with the same mask.
// Where a GPU would hang or compute garbage, the block faults instead, with a message: threads stuck
// at barriers none of the others will reach (divergent __syncthreads, a mask naming a lane that
// waits elsewhere), a mask naming lanes that exited or do not exist, lanes of one warp in different
// warp operations.
#include <optional>
#include <string>

#include "gpusim/launch.h"

namespace gpusim {

struct BlockFault {
  cudaError_t error = cudaErrorLaunchFailure;
  std::string message;  // which threads, doing what
};

// The block `index` of `launch`, with `dynamic_shared` (launch.dynamic_shared_bytes, 0xFF-filled by
// the caller) as its dynamically sized shared memory.
std::optional<BlockFault> run_block(const KernelLaunch& launch, uint3 index, unsigned char* dynamic_shared);

}  // namespace gpusim
