// Exact value -> output bit pattern, with the conversions of seed 003 Table 2.
#pragma once
#include "params.h"

namespace mma {

enum Mode : int32_t { kRZ = 0, kRNE = 1, kRD = 2, kRU = 3 };

// Target of a conversion: a rounding grid of `mbits` fraction bits inside a container
// (E8M13 rounds to 13 bits but is stored as an fp32 word).
struct OutFmt {
  int32_t mbits, emin, emax, bias, cm, cbits, mode;
};

MMA_HD OutFmt out_fmt(int32_t rho) {
  switch (rho) {
    case kRzFp32: return OutFmt{23, -126, 127, 127, 23, 32, kRZ};
    case kRzE8m13: return OutFmt{13, -126, 127, 127, 23, 32, kRZ};
    case kRneFp32: return OutFmt{23, -126, 127, 127, 23, 32, kRNE};
    case kRneFp16: return OutFmt{10, -14, 15, 15, 10, 16, kRNE};
    default: return OutFmt{52, -1022, 1023, 1023, 52, 64, kRNE};
  }
}

MMA_HD uint64_t sign_bit(const OutFmt& o) { return uint64_t(1) << (o.cbits - 1); }
MMA_HD uint64_t inf_bits(const OutFmt& o, int neg) {
  const int eb = o.cbits - 1 - o.cm;
  return (neg ? sign_bit(o) : 0) | (((uint64_t(1) << eb) - 1) << o.cm);
}

// Round neg * (mag * 2^exp2 + tiny) to the target, where `sticky` says a nonzero amount
// smaller than one unit of mag was dropped before.  Zero magnitude gives a zero of sign
// `neg`; so does a nonzero value that rounds to zero.  Overflow gives an infinity (also
// in round-toward-zero mode, as MMA-Sim and the MATLAB models of the hardware do).
MMA_HD uint64_t round_pack(int neg, uint64_t mag, int32_t exp2, const OutFmt& o,
                           int32_t mode, bool sticky = false) {
  const uint64_t sgn = neg ? sign_bit(o) : 0;
  if (mag == 0) return sgn;
  const int32_t n = bitlen64(mag);
  const int32_t E = exp2 + n - 1;            // value in [2^E, 2^(E+1))
  int32_t q = imax(E, o.emin) - o.mbits;    // exponent of the last kept bit
  const int32_t s = q - exp2;                // bits to drop
  uint64_t r;
  bool up = false;
  if (s <= 0) {
    r = mag << (-s);
    if (sticky) up = (mode == kRD && neg) || (mode == kRU && !neg);
    // RNE with only a sticky remainder below the last bit never rounds up.
  } else {
    r = s >= 64 ? 0 : (mag >> s);
    const bool rbit = (s - 1) < 64 ? ((mag >> (s - 1)) & 1) : false;
    const uint64_t below = (s - 1) >= 64 ? mag : (mag & ((uint64_t(1) << (s - 1)) - 1));
    const bool rest = below != 0 || sticky;
    switch (mode) {
      case kRNE: up = rbit && (rest || (r & 1)); break;
      case kRD: up = neg && (rbit || rest); break;
      case kRU: up = !neg && (rbit || rest); break;
      default: up = false;
    }
  }
  if (up) {
    r += 1;
    if (r == (uint64_t(1) << (o.mbits + 1))) { r >>= 1; q += 1; }
  }
  if (r == 0) return sgn;
  if (r >= (uint64_t(1) << o.mbits)) {
    const int32_t Ef = q + o.mbits;
    if (Ef > o.emax) return inf_bits(o, neg);
    const uint64_t frac = (r - (uint64_t(1) << o.mbits)) << (o.cm - o.mbits);
    return sgn | (uint64_t(Ef + o.bias) << o.cm) | frac;
  }
  return sgn | (r << (o.cm - o.mbits));  // subnormal (q == emin - mbits)
}

// Signed 64-bit fixed-point value v * 2^exp2 -> output bits.  An exact zero is +0.
MMA_HD uint64_t round_fixed(int64_t v, int32_t exp2, const OutFmt& o) {
  if (v == 0) return 0;
  const int neg = v < 0;
  return round_pack(neg, neg ? uint64_t(-v) : uint64_t(v), exp2, o, o.mode);
}

}  // namespace mma
