// Fast decoders for decode_rows (decoded.h): runs of codes -> (sig, exp, cls) with the bits of
// core/decode.h's decode().  The four fp8 formats (e4m3fn, e5m2 and their fnuz forms), fp16,
// bf16 and tf32 / xf32 (fp32 words) go through a branch-free decode specialised at compile
// time (vectorised, AVX2 clone on x86); other codes in 1-byte elements (fp6, fp4, scales)
// through a 256-entry table made by decode() itself.  Every other format / element size:
// decode() per code.
// No torch here.
#pragma once
#include <cstdint>

#include "../core/decode.h"

namespace mma {

// decode() of one code of a signed IEEE-style format with EB exponent and MB fraction bits,
// above SHIFT dropped low bits (tf32 / xf32 in fp32 words: decode() truncates them), without
// branches (masks 0 / -1: loops over it vectorise): zero {0, kZeroExp}, subnormal {+-m,
// emin}, normal {+-(m | 2^MB), e - bias}, infinity {+-1, kZeroExp, kInf}, NaN {0, kZeroExp,
// kNan}.  STYLE (nan_style): kIeee, kFn (no infinity, NaN = all exponent and fraction bits:
// e4m3fn) or kFnuz (no infinity, NaN = the negative zero code).  The decoders of runs below
// and the planes filled straight from codes (FdpaEngine::fill_direct) share it.
struct DecCode {
  int32_t sig, exp, cls;
};
template <int EB, int MB, int SHIFT, int STYLE = kIeee>
inline __attribute__((always_inline)) DecCode decode_code(uint32_t code, int32_t bias) {
  static_assert(kInf == 1 && kNan == 2, "the classes");
  constexpr uint32_t emask = (1u << EB) - 1, mmask = (1u << MB) - 1;
  const int32_t emin = 1 - bias;
  const int32_t c = int32_t(code >> SHIFT);
  const int32_t e = (c >> MB) & int32_t(emask), m = c & int32_t(mmask);
  const int32_t neg = -(c >> (EB + MB)), sub = -int32_t(e == 0);
  const int32_t mnz = -int32_t(m != 0);
  // sp: the special codes (IEEE: the top exponent; fn / fnuz: the NaN code)
  const int32_t sp = STYLE == kIeee ? -int32_t(e == int32_t(emask))
                     : STYLE == kFn ? -int32_t((c & ((1 << (EB + MB)) - 1)) == (1 << (EB + MB)) - 1)
                                    : -int32_t(c == (1 << (EB + MB)));
  int32_t s = m | (~sub & (1 << MB));
  int32_t x = (sub & ((mnz & emin) | (~mnz & kZeroExp))) | (~sub & (e - bias));
  // infinity: 1, NaN: 0
  s = STYLE == kIeee ? (sp & ~mnz & 1) | (~sp & s) : ~sp & s;
  x = (sp & kZeroExp) | (~sp & x);
  const int32_t cl = STYLE == kIeee ? sp & (int32_t(kInf) + (mnz & 1))  // kInf, kNan = kInf + 1
                                    : sp & int32_t(kNan);
  return DecCode{(s ^ neg) - neg, x, cl};
}

enum class DecPath : int { kGeneric = 0, kLut8, kFp16, kBf16, kTf32, kE4m3Fn, kE5m2, kE4m3Fnuz, kE5m2Fnuz };

// which decoder serves codes of format f held in esize-byte elements
DecPath dec_path(const FormatDesc& f, int esize);

// decode(f, c) for every byte c (format f)
struct DecLut {
  int32_t sig[256], exp[256];
  uint8_t cls[256];
};
// the calling thread's table for f (made on first use, a few formats kept)
const DecLut& dec_lut(const FormatDesc& f);

// n codes -> sig / exp / cls; returns the OR of the classes (kInf | kNan seen)
uint8_t decode_lut8(const DecLut& t, const uint8_t* src, int64_t n, int32_t* sig, int32_t* exp,
                    uint8_t* cls);
uint8_t decode_fp16(const uint16_t* src, int64_t n, int32_t bias, int32_t* sig, int32_t* exp,
                    uint8_t* cls);
uint8_t decode_bf16(const uint16_t* src, int64_t n, int32_t bias, int32_t* sig, int32_t* exp,
                    uint8_t* cls);
// fp8 codes of the formats of the paths kE4m3Fn .. kE5m2Fnuz
uint8_t decode_fp8(DecPath path, const uint8_t* src, int64_t n, int32_t bias, int32_t* sig,
                   int32_t* exp, uint8_t* cls);
// tf32 / xf32 in fp32 words (the low 13 bits dropped, as decode() does)
uint8_t decode_tf32(const uint32_t* src, int64_t n, int32_t bias, int32_t* sig, int32_t* exp,
                    uint8_t* cls);

}  // namespace mma
