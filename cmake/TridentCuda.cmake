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

# The CUDA backend is a module that `trident` loads at run time (kernels/cuda_module.hpp), not a library
# it links: an executable linked to libcudart, cuBLAS and NCCL loads them at start-up on every run, the
# CPU runs included, so that
#  - a CPU node without the CUDA libraries could not run trident at all (the loader fails, exit 127);
#  - a CPU run needed the address space of those libraries: a small run that needs about 330 MB on its
#    own needed about 1.2 GB, and under `ulimit -v` below about 0.9 GB every run failed before main;
#  - start-up took longer, and signals in that window killed the process before its handlers existed.
# So every piece of code that calls CUDA, cuBLAS(Lt) or NCCL (kernels/cuda/: the kernels, device
# queries and binding, the NCCL transport, host-staging copies) goes into libtrident_cuda.so next to
# the executable, dlopen'ed on first need (runtime.backend = "cuda"). The module leaves trident's own
# symbols (trident::Error, logging, the watchdog) unresolved: the executable exports them (it links
# trident_lib whole, ENABLE_EXPORTS), so a process has one copy of trident's global state and one
# typeinfo per class (errors thrown in the module are caught as trident::Error in the core).
# Test programs and benchmarks link the same objects in instead (trident_lib_cuda_linked below).
#
# trident_add_cuda_backend(core): after the core library `core` (trident_lib) exists, defines
#   trident_cuda_module      the module (CUDA builds only)
#   trident_lib_cuda_linked  `core` with the CUDA backend linked in, registered at start-up (every build:
#                            in a build without CUDA it is `core` alone), for tests and benchmarks
function(trident_add_cuda_backend core)
  add_library(trident_lib_cuda_linked INTERFACE)
  target_link_libraries(trident_lib_cuda_linked INTERFACE ${core})
  if(NOT TRIDENT_CUDA_ENABLED)
    return()
  endif()
  target_compile_definitions(${core} PUBLIC TRIDENT_HAVE_CUDA=1)
  file(GLOB _cuda_sources CONFIGURE_DEPENDS
    ${PROJECT_SOURCE_DIR}/kernels/cuda/*.cu ${PROJECT_SOURCE_DIR}/kernels/cuda/*.cpp)
  set(_link_statically ${PROJECT_SOURCE_DIR}/kernels/cuda/link_statically.cpp)
  list(REMOVE_ITEM _cuda_sources ${_link_statically})
  # Compiled once, for the module and for the programs that link the backend in.
  add_library(trident_cuda_objects OBJECT ${_cuda_sources})
  target_include_directories(trident_cuda_objects PUBLIC ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/kernels
    ${PROJECT_BINARY_DIR}/generated)
  set_target_properties(trident_cuda_objects PROPERTIES POSITION_INDEPENDENT_CODE ON)
  if(TRIDENT_GPU_SIM)
    # The .cu files as C++ for the host compiler. `#pragma unroll` is nvcc's (GCC has its own spelling).
    set_source_files_properties(${_cuda_sources} PROPERTIES LANGUAGE CXX)
    target_compile_options(trident_cuda_objects PRIVATE -x c++ -Wno-unknown-pragmas)
    target_link_libraries(trident_cuda_objects PUBLIC gpusim MPI::MPI_CXX spdlog::spdlog fmt::fmt)
  else()
    add_library(trident::nccl UNKNOWN IMPORTED)
    set_target_properties(trident::nccl PROPERTIES IMPORTED_LOCATION ${NCCL_LIBRARY}
      INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
    target_link_libraries(trident_cuda_objects PUBLIC CUDA::cudart CUDA::cublas CUDA::cublasLt trident::nccl
      MPI::MPI_CXX spdlog::spdlog fmt::fmt)
    set_target_properties(trident_cuda_objects PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
  endif()

  # The module, next to the executable (kernels/cuda_module.cpp looks for this file name there).
  add_library(trident_cuda_module MODULE)
  target_link_libraries(trident_cuda_module PRIVATE trident_cuda_objects)
  set_target_properties(trident_cuda_module PROPERTIES OUTPUT_NAME trident_cuda
    LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})

  # Programs that link the backend in: all of it (whole archive), so that link_statically.cpp's
  # registration runs and nothing is left for a loaded module to supply.
  add_library(trident_cuda_static STATIC ${_link_statically})
  target_link_libraries(trident_cuda_static PUBLIC trident_cuda_objects ${core})
  target_link_libraries(trident_lib_cuda_linked INTERFACE "$<LINK_LIBRARY:WHOLE_ARCHIVE,trident_cuda_static>")
endfunction()
