#pragma once
// gpu-sim's cub/cub.cuh: the parts of cub that gpu-sim simulates (gpusim/README.md).
#include "cub/device/device_radix_sort.cuh"
