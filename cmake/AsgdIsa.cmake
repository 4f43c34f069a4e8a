# The instruction set the code is compiled for: the build mode (docs/building.md#build-modes).
#
#   ASGD_NATIVE=ON   "native": -march=native, this machine's instruction set. Fastest; a
#                    float may round differently on another CPU model (Eigen's kernels take
#                    the vector width and fused multiply-adds the CPU has).
#   ASGD_NATIVE=OFF  "portable": the baseline x86-64 (SSE2, no FMA), and nothing chosen from
#                    the running CPU, so a simulated run's CSVs are the same on every x86-64
#                    CPU: Eigen's GEMM blocking from its fixed cache sizes (EIGEN_NO_CPUID)
#                    instead of the CPU's, and at run time the libraries' own dispatch
#                    pinned by the asgd binary (experiments/config/cpu_dispatch.h).
#
# Sets ASGD_BUILD_MODE ("native" or "portable") and ASGD_MARCH (the -march the code is
# compiled for; native as the compiler resolves it, e.g. "native (znver3)") for the
# generated core/build_config.h (with ASGD_PORTABLE 0 or 1), and ASGD_HAS_MARCH_NATIVE
# when -march=native is used. Applied globally so that
# every object agrees (an inline function of Eigen compiled two ways would break the ODR).
set(ASGD_BUILD_MODE portable)
set(ASGD_MARCH "compiler default")
set(ASGD_PORTABLE 0)
if(ASGD_NATIVE)
  include(CheckCXXCompilerFlag)
  check_cxx_compiler_flag("-march=native" ASGD_HAS_MARCH_NATIVE)
  if(ASGD_HAS_MARCH_NATIVE)
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-march=native>)
    set(ASGD_BUILD_MODE native)
    # What -march=native means here, for the run's provenance: GCC names it with -Q,
    # clang with the -target-cpu it passes on.
    set(resolved "")
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      execute_process(COMMAND ${CMAKE_CXX_COMPILER} -march=native -Q --help=target
                      OUTPUT_VARIABLE target_help ERROR_QUIET)
      if(target_help MATCHES "-march=[ \t]+([^ \t\n]+)")
        set(resolved "${CMAKE_MATCH_1}")
      endif()
    elseif(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
      execute_process(COMMAND ${CMAKE_CXX_COMPILER} -march=native -### -x c++ -c /dev/null
                      ERROR_VARIABLE driver_lines OUTPUT_QUIET)
      if(driver_lines MATCHES "\"-target-cpu\" \"([^\"]+)\"")
        set(resolved "${CMAKE_MATCH_1}")
      endif()
    endif()
    set(ASGD_MARCH "native")
    if(resolved)
      set(ASGD_MARCH "native (${resolved})")
    endif()
  else()
    message(WARNING "ASGD_NATIVE=ON but ${CMAKE_CXX_COMPILER_ID} does not take -march=native; "
                    "building for the compiler's default instruction set")
    set(ASGD_BUILD_MODE "default")
  endif()
else()
  set(ASGD_PORTABLE 1)
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
    # Named, not left to the compiler: some distributions' GCC defaults to x86-64-v2 or v3.
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-march=x86-64>
                        $<$<COMPILE_LANGUAGE:CXX>:-mtune=generic>)
    set(ASGD_MARCH "x86-64")
  endif()
  # Eigen reads the caches' sizes with CPUID and derives its GEMM blocking from them: the
  # depth of a block (kc, from L1) sets where a dot product's partial sums are added to the
  # result, hence its rounding (L1 48 KiB on the development VM's EPYC, 32 KiB on a
  # Nehalem). Without CPUID Eigen takes its fixed defaults (x86: 32 KiB, 256 KiB, 2 MiB).
  add_compile_definitions(EIGEN_NO_CPUID)
endif()
