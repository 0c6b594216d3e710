// Bit pattern -> (signed significand, exponent, class).  Mirrors formats.classify().
#pragma once
#include "params.h"

namespace mma {

enum Cls : uint8_t { kFinite = 0, kInf = 1, kNan = 2 };

// value = sig * 2^(exp - mbits); zero has sig = 0 and exp = kZeroExp; infinities have
// cls = kInf and sig = +-1.
struct Dec {
  int32_t sig;
  int32_t exp;
  uint8_t cls;
};

MMA_HD Dec decode(const FormatDesc& f, uint64_t code) {
  Dec d{0, kZeroExp, kFinite};
  if (f.container == 32) code = (code >> 13) & ((1u << 19) - 1);  // tf32/xf32: truncate
  if (f.nan_style == kE8m0) {
    code &= 0xFF;
    if (code == 0xFF) { d.cls = kNan; return d; }
    d.sig = 1; d.exp = int32_t(code) - f.bias;
    return d;
  }
  const int nbits = f.ebits + f.mbits + 1;
  code &= (nbits >= 64) ? ~uint64_t(0) : ((uint64_t(1) << nbits) - 1);
  const int neg = f.is_signed ? int((code >> (f.ebits + f.mbits)) & 1) : 0;
  const uint32_t emask = (1u << f.ebits) - 1;
  const uint32_t ebits = uint32_t(code >> f.mbits) & emask;
  const uint64_t mant = code & ((uint64_t(1) << f.mbits) - 1);
  if (f.nan_style == kIeee && ebits == emask) {
    if (mant) { d.cls = kNan; return d; }
    d.cls = kInf; d.sig = neg ? -1 : 1; return d;
  }
  if (f.nan_style == kFn && ebits == emask && mant == (uint64_t(1) << f.mbits) - 1) {
    d.cls = kNan; return d;
  }
  if (f.nan_style == kFnuz && neg && ebits == 0 && mant == 0) { d.cls = kNan; return d; }
  if (ebits == 0) {
    if (mant == 0) return d;  // zero (either sign)
    d.exp = f.emin();
    d.sig = neg ? -int32_t(mant) : int32_t(mant);
    return d;
  }
  const int32_t s = int32_t(mant | (uint64_t(1) << f.mbits));
  d.sig = neg ? -s : s;
  d.exp = int32_t(ebits) - f.bias;
  return d;
}

}  // namespace mma
