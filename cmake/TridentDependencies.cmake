# Finds every dependency of the CPU build (Debian 12 packages, see scripts/install-deps.sh).
# Workarounds for Debian's packaging are explained inline (see also docs/architecture.md).

find_package(MPI REQUIRED COMPONENTS C CXX)

# Kokkos 3.4 from Debian's Trilinos: its imported target names a non-existent include path.
find_package(Kokkos REQUIRED)
get_filename_component(_trident_kokkos_inc "${Kokkos_INCLUDE_DIRS}" REALPATH)
set_target_properties(Kokkos::kokkos PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_trident_kokkos_inc}")
set_property(TARGET Kokkos::kokkos APPEND PROPERTY INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${_trident_kokkos_inc}")
find_package(KokkosKernels REQUIRED)
if(NOT TARGET trident::kokkoskernels)
  add_library(trident::kokkoskernels INTERFACE IMPORTED)
  if(TARGET Kokkos::kokkoskernels)
    target_link_libraries(trident::kokkoskernels INTERFACE Kokkos::kokkoskernels)
  else()
    target_link_libraries(trident::kokkoskernels INTERFACE trilinos_kokkoskernels)
  endif()
endif()

# BLAS: OpenBLAS directly too, for openblas_get_corename() (see src/core/blas_runtime.cpp).
find_library(TRIDENT_OPENBLAS_LIBRARY NAMES openblas REQUIRED)
find_path(TRIDENT_CBLAS_INCLUDE cblas.h PATH_SUFFIXES openblas x86_64-linux-gnu/openblas-pthread REQUIRED)
if(NOT TARGET trident::blas)
  add_library(trident::blas INTERFACE IMPORTED)
  target_link_libraries(trident::blas INTERFACE ${TRIDENT_OPENBLAS_LIBRARY})
  target_include_directories(trident::blas INTERFACE ${TRIDENT_CBLAS_INCLUDE})
endif()

# Parallel HDF5 only: checkpoints are written collectively through MPI-IO.
set(HDF5_PREFER_PARALLEL TRUE)
if(NOT HDF5_C_COMPILER_EXECUTABLE AND EXISTS /usr/bin/h5pcc)
  set(HDF5_C_COMPILER_EXECUTABLE /usr/bin/h5pcc)
endif()
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR "trident needs parallel HDF5 (libhdf5-mpich-dev); only a serial HDF5 was found")
endif()
if(NOT TARGET trident::hdf5)
  add_library(trident::hdf5 INTERFACE IMPORTED)
  target_link_libraries(trident::hdf5 INTERFACE ${HDF5_C_LIBRARIES})
  target_include_directories(trident::hdf5 INTERFACE ${HDF5_C_INCLUDE_DIRS})
  target_compile_definitions(trident::hdf5 INTERFACE ${HDF5_C_DEFINITIONS})
endif()

find_package(tomlplusplus REQUIRED)
find_package(CLI11 REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json REQUIRED)
# PCRE2 (libpcre2-dev) for GPT-2's pre-tokenisation pattern (src/text/pretokenizer.cpp).
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
if(TRIDENT_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(TRIDENT_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()
