// IEEE binary32/binary64 operations with round-to-nearest-even, never contracted.
// Device code uses the explicit _rn intrinsics; host code is compiled with
// -ffp-contract=off and the CPU kernel clears FTZ/DAZ (see cpu/fpenv.h).
#pragma once
#include <cmath>

#include "common.h"

namespace mma {

MMA_HD float mul_rn(float a, float b) { return MMA_DEV_OR_HOST(__fmul_rn(a, b), a * b); }
MMA_HD double mul_rn(double a, double b) { return MMA_DEV_OR_HOST(__dmul_rn(a, b), a * b); }
MMA_HD float add_rn(float a, float b) { return MMA_DEV_OR_HOST(__fadd_rn(a, b), a + b); }
MMA_HD double add_rn(double a, double b) { return MMA_DEV_OR_HOST(__dadd_rn(a, b), a + b); }
MMA_HD float fma_rn(float a, float b, float c) {
  return MMA_DEV_OR_HOST(__fmaf_rn(a, b, c), std::fma(a, b, c));
}
MMA_HD double fma_rn(double a, double b, double c) {
  return MMA_DEV_OR_HOST(__fma_rn(a, b, c), std::fma(a, b, c));
}
// binary64 -> binary32 with round to nearest even (host: under the CPU kernel's FpEnvGuard)
MMA_HD float f32_rn(double x) {
  return MMA_DEV_OR_HOST(__double2float_rn(x), static_cast<float>(x));
}

MMA_HD bool is_nan(float x) { return (bits_of(x) & 0x7FFFFFFFu) > 0x7F800000u; }
MMA_HD bool is_nan(double x) {
  return (bits_of(x) & 0x7FFFFFFFFFFFFFFFull) > 0x7FF0000000000000ull;
}

// FTZ of AMD CDNA2 (seed 003 Algorithm 1): |z| < 2^-126 becomes a zero of the same sign.
MMA_HD float ftz_keep_sign(float z) {
  const uint32_t b = bits_of(z);
  return ((b & 0x7F800000u) == 0) ? f32_of(b & 0x80000000u) : z;
}

}  // namespace mma
