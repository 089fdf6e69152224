# Optional CUDA backend: CUDA kernels + cuBLAS + NCCL. Compiles without a GPU or driver; the binary
# never links the driver stub (libcuda), so it still starts on machines without one.
# TRIDENT_GPU_SIM=ON builds the same backend for gpu-sim instead (gpusim/README.md): the .cu files are
# compiled by the host C++ compiler against gpusim/include and run on the CPU; no CUDA toolkit is used.
set(TRIDENT_CUDA_ENABLED OFF)
if(TRIDENT_GPU_SIM)
  set(TRIDENT_CUDA_ENABLED ON)
  add_subdirectory(${PROJECT_SOURCE_DIR}/gpusim ${PROJECT_BINARY_DIR}/gpusim)
elseif(NOT TRIDENT_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)   # the default toolkit, even when not on PATH
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)   # Hopper; "native" fails where there is no GPU
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    if(NCCL_LIBRARY AND NCCL_INCLUDE_DIR)
      set(TRIDENT_CUDA_ENABLED ON)
    elseif(TRIDENT_CUDA STREQUAL "ON")
      message(FATAL_ERROR "TRIDENT_CUDA=ON but NCCL was not found")
    endif()
  elseif(TRIDENT_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TRIDENT_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "trident: CUDA backend ${TRIDENT_CUDA_ENABLED} (gpu-sim ${TRIDENT_GPU_SIM})")
if(TRIDENT_CUDA_ENABLED)
  set(TRIDENT_CUDA_ENABLED_INT 1)
else()
  set(TRIDENT_CUDA_ENABLED_INT 0)
endif()

function(trident_add_cuda_backend target)
  if(NOT TRIDENT_CUDA_ENABLED)
    return()
  endif()
  file(GLOB_RECURSE _cuda_sources CONFIGURE_DEPENDS
    ${PROJECT_SOURCE_DIR}/kernels/cuda/*.cu
)
  add_library(trident_cuda STATIC ${_cuda_sources})
  target_include_directories(trident_cuda PUBLIC ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/kernels
    ${PROJECT_BINARY_DIR}/generated)
  target_link_libraries(${target} PUBLIC trident_cuda)
  target_compile_definitions(${target} PUBLIC TRIDENT_HAVE_CUDA=1)
  if(TRIDENT_GPU_SIM)
    # The .cu files as C++ for the host compiler. `#pragma unroll` is nvcc's (GCC has its own spelling).
    set_source_files_properties(${_cuda_sources} PROPERTIES LANGUAGE CXX)
    target_compile_options(trident_cuda PRIVATE -x c++ -Wno-unknown-pragmas)
    target_link_libraries(trident_cuda PUBLIC gpusim spdlog::spdlog fmt::fmt)
    return()
  endif()
  add_library(trident::nccl UNKNOWN IMPORTED)
  set_target_properties(trident::nccl PROPERTIES IMPORTED_LOCATION ${NCCL_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
  target_link_libraries(trident_cuda PUBLIC CUDA::cudart CUDA::cublas CUDA::cublasLt trident::nccl
    MPI::MPI_CXX spdlog::spdlog fmt::fmt)
  set_target_properties(trident_cuda PROPERTIES CUDA_SEPARABLE_COMPILATION OFF POSITION_INDEPENDENT_CODE ON)
endfunction()
