# asgd_set_warnings(target): the project's warning flags, errors when ASGD_WERROR is ON.
# -Wnull-dereference is left out: GCC 12 reports it inside inlined library code
# (Boost.Program_options, libstdc++) at -O2, where it is a false positive.
# Sanitizer flags are applied globally below so that every object agrees (-march:
# cmake/AsgdIsa.cmake).
function(asgd_set_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
      -Wcast-align -Wunused -Woverloaded-virtual -Wimplicit-fallthrough>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${ASGD_WERROR}>>:-Werror>
    $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${ASGD_WERROR}>>:-Werror=all-warnings>)
endfunction()

# No contraction of a*b+c into fused multiply-adds behind our back: with it, the same
# update written in two places (a worker's optimizer, a server rule) may round
# differently, and the strategies' bit-exact equivalences
# (docs/algorithms.md#equivalences-and-invariants) would hold
# or not depending on how the compiler scheduled an expression. Eigen's GEMM kernels use
# FMA intrinsics explicitly where the instruction set has them (the native build on an FMA
# CPU; never the portable build) and are not affected.
add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off>)

if(ASGD_SANITIZE)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${ASGD_SANITIZE}>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=all>)
  add_link_options(-fsanitize=${ASGD_SANITIZE})
  # GCC 12 with -fsanitize=address reports libstdc++'s <regex> (the std::function members
  # of its NFA states) as "may be used uninitialized" in every file that builds a
  # std::regex: a false positive that -Werror turns into a failed build. The warning stays
  # on in the builds without the address sanitizer.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND ASGD_SANITIZE MATCHES "address")
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-Wno-maybe-uninitialized>)
  endif()
endif()
