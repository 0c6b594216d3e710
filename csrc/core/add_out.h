// One IEEE addition (RNE) in the output format: c_mode="epilogue" and the final c addition
// of multi-pass instructions (passes.h).
#pragma once
#include "decode.h"
#include "ieee.h"
#include "round.h"

namespace mma {

MMA_HD uint64_t epilogue_add(const Params& P, uint64_t x, uint64_t y) {
  if (P.rho == kRneFp64) {
    const double r = add_rn(f64_of(x), f64_of(y));
    return is_nan(r) ? P.nan_bits : bits_of(r);
  }
  if (P.rho != kRneFp16) {
    const float r = add_rn(f32_of(uint32_t(x)), f32_of(uint32_t(y)));
    return is_nan(r) ? P.nan_bits : bits_of(r);
  }
  // fp16: the sum of two fp16 values is exact in binary64; round it once.
  const Dec dx = decode(P.fo, x), dy = decode(P.fo, y);
  if (dx.cls == kNan || dy.cls == kNan) return P.nan_bits;
  const OutFmt o = out_fmt(kRneFp16);
  if (dx.cls == kInf || dy.cls == kInf) {
    if (dx.cls == kInf && dy.cls == kInf && (dx.sig < 0) != (dy.sig < 0)) return P.nan_bits;
    return inf_bits(o, (dx.cls == kInf ? dx.sig : dy.sig) < 0);
  }
  // both finite: exact integer sum at the common lsb 2^(emin - 10)
  const int32_t lsb = -14 - 10;
  const int64_t vx = dx.sig ? int64_t(dx.sig) * (int64_t(1) << (dx.exp - 10 - lsb)) : 0;
  const int64_t vy = dy.sig ? int64_t(dy.sig) * (int64_t(1) << (dy.exp - 10 - lsb)) : 0;
  const int64_t v = vx + vy;
  if (v == 0) {  // IEEE: -0 + -0 = -0, otherwise an exact zero sum is +0
    const bool nx = (x >> 15) & 1, ny = (y >> 15) & 1;
    return (nx && ny) ? 0x8000 : 0;
  }
  return round_pack(v < 0, v < 0 ? uint64_t(-v) : uint64_t(v), lsb, o, kRNE);
}

}  // namespace mma
