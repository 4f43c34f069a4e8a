// Internal to models/ (and its tests and benchmark): include Eigen through this header.
//
// GCC 12 reports false errors inside its own AVX-512 intrinsics when Eigen's kernels are
// inlined with -march=native: -W(maybe-)uninitialized on _mm512_undefined_* (GCC bug
// 105593; the definite form appears in sanitizer builds) and -Warray-bounds on full-vector stores into small fixed-size buffers on paths
// Eigen never takes. Both diagnostics are located in the intrinsics headers, so ignoring
// them around the first inclusion of those headers silences exactly these, and nothing in
// our own code.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Warray-bounds"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

#include <Eigen/Core>
