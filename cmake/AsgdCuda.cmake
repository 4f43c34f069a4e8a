# CUDA is on by default where nvcc is found; -DASGD_CUDA=OFF turns it off.
# Sets ASGD_HAVE_CUDA to 0 or 1 for the generated core/build_config.h.
include(CheckLanguage)
set(ASGD_HAVE_CUDA 0)
set(ASGD_CUDA_COMPILER_DESC "none")
if(NOT DEFINED ASGD_CUDA OR ASGD_CUDA)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    # The shared CUDA runtime everywhere: cuBLAS is linked shared and brings libcudart.so,
    # and one process must not hold two runtimes (CMake's default for the CUDA language
    # adds cudart_static to every executable that links CUDA objects).
    if(NOT DEFINED CMAKE_CUDA_RUNTIME_LIBRARY)
      set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(ASGD_HAVE_CUDA 1)
    set(ASGD_CUDA_COMPILER_DESC "nvcc ${CMAKE_CUDA_COMPILER_VERSION} (arch ${CMAKE_CUDA_ARCHITECTURES})")
  elseif(ASGD_CUDA)
    message(FATAL_ERROR "ASGD_CUDA=ON but no CUDA compiler (nvcc) was found")
  endif()
endif()
set(ASGD_CUDA ${ASGD_HAVE_CUDA} CACHE BOOL "Build the CUDA models (auto-detected)")
