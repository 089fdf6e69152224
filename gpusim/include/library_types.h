#pragma once
// gpu-sim: the data-type enumerations CUDA libraries share (CUDA's library_types.h). Values as in
// CUDA 13, so that code compiled against either header means the same thing.

typedef enum cudaDataType_t {
  CUDA_R_32F = 0,
  CUDA_R_64F = 1,
  CUDA_R_16F = 2,
  CUDA_R_8I = 3,
  CUDA_R_8U = 8,
  CUDA_R_32I = 10,
  CUDA_R_32U = 12,
  CUDA_R_16BF = 14,
  CUDA_R_16I = 20,
  CUDA_R_16U = 22,
  CUDA_R_64I = 24,
  CUDA_R_64U = 26,
  CUDA_R_8F_E4M3 = 28,
  CUDA_R_8F_E5M2 = 29,
} cudaDataType;

typedef enum libraryPropertyType_t { MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL } libraryPropertyType;
