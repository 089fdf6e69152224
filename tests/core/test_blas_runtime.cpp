#include <gtest/gtest.h>

#include "core/blas_runtime.hpp"

TEST(BlasRuntime, ReportsAKernelFamily) {
  // Whatever the CPU, OpenBLAS names the kernel family it picked; an empty name would mean the
  // library was not the OpenBLAS that the re-exec tuning talks to.
  EXPECT_FALSE(trident::blas_core_name().empty());
}
