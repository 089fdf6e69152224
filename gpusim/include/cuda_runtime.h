#pragma once
// gpu-sim's cuda_runtime.h: the CUDA runtime API and the device built-ins for CUDA sources compiled by
// a host C++ compiler and run on the CPU (gpusim/README.md). The real header of the same name comes
// with the CUDA toolkit; a gpu-sim build puts this directory first on the include path instead.
#include <cmath>

#include "gpusim/device_builtins.h"
#include "gpusim/driver_types.h"
#include "gpusim/launch.h"
#include "gpusim/runtime_api.h"

#define CUDART_VERSION 13000
