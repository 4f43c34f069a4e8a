# The TorchScript model backend (models/torch/) is on by default where libtorch's CMake
# package (Torch) is found; -DASGD_TORCH=OFF turns it off, -DASGD_TORCH=ON requires it.
# Sets ASGD_HAVE_TORCH to 0 or 1 for the generated core/build_config.h.
#
# libtorch is linked PRIVATE by asgd_models_torch only: its imported targets carry compile
# definitions, -D_GLIBCXX_USE_CXX11_ABI and glog/gflags/protobuf, which nothing else in
# asgd should see.
set(ASGD_HAVE_TORCH 0)
if(NOT DEFINED ASGD_TORCH OR ASGD_TORCH)
  find_package(Torch QUIET)
  if(Torch_FOUND AND TARGET torch)
    set(ASGD_HAVE_TORCH 1)
  elseif(ASGD_TORCH)
    message(FATAL_ERROR "ASGD_TORCH=ON but libtorch's CMake package (Torch) was not found "
                        "(Debian: apt-get install libtorch-dev)")
  endif()
endif()
set(ASGD_TORCH ${ASGD_HAVE_TORCH} CACHE BOOL "Build the TorchScript model backend (auto-detected)")
