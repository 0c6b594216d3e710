// Fast decoders (decode_fast.h).  tests/test_cpu_fast_decode.py puts every code of every
// input format of <= 16 bits through them and compares with the scalar path (decode()).
#include "decode_fast.h"

#include <cstring>

#include "clones.h"

namespace mma {

DecPath dec_path(const FormatDesc& f, int esize) {
  if (esize == 1 && f.is_signed && f.container != 32 && f.ebits + f.mbits == 7) {  // fp8
    const int em = f.ebits * 8 + f.mbits;
    if (em == 4 * 8 + 3 && f.nan_style == kFn) return DecPath::kE4m3Fn;
    if (em == 5 * 8 + 2 && f.nan_style == kIeee) return DecPath::kE5m2;
    if (em == 4 * 8 + 3 && f.nan_style == kFnuz) return DecPath::kE4m3Fnuz;
    if (em == 5 * 8 + 2 && f.nan_style == kFnuz) return DecPath::kE5m2Fnuz;
  }
  if (esize == 1) return DecPath::kLut8;  // the table is decode() of every byte
  if (f.nan_style != kIeee || !f.is_signed) return DecPath::kGeneric;
  if (esize == 4 && f.container == 32 && f.ebits == 8 && f.mbits == 10) return DecPath::kTf32;
  if (esize != 2 || f.container == 32) return DecPath::kGeneric;
  if (f.ebits == 5 && f.mbits == 10) return DecPath::kFp16;
  if (f.ebits == 8 && f.mbits == 7) return DecPath::kBf16;
  return DecPath::kGeneric;
}

const DecLut& dec_lut(const FormatDesc& f) {
  struct Entry {
    FormatDesc f;
    bool used;
    DecLut t;
  };
  thread_local Entry cache[4] = {};
  thread_local int next = 0;
  for (Entry& e : cache)
    if (e.used && std::memcmp(&e.f, &f, sizeof f) == 0) return e.t;
  Entry& e = cache[next];
  next = (next + 1) % 4;
  e.f = f;
  e.used = true;
  for (uint32_t c = 0; c < 256; ++c) {
    const Dec d = decode(f, c);
    e.t.sig[c] = d.sig;
    e.t.exp[c] = d.exp;
    e.t.cls[c] = d.cls;
  }
  return e.t;
}

uint8_t decode_lut8(const DecLut& t, const uint8_t* __restrict src, int64_t n,
                    int32_t* __restrict sig, int32_t* __restrict exp, uint8_t* __restrict cls) {
  uint8_t fl = 0;
  for (int64_t k = 0; k < n; ++k) {
    const uint8_t c = src[k];
    sig[k] = t.sig[c];
    exp[k] = t.exp[c];
    cls[k] = t.cls[c];
    fl |= t.cls[c];
  }
  return fl;
}

namespace {

// decode_code over a run of n codes of type T (SHIFT: their dropped low bits); the OR of the
// classes
template <int EB, int MB, class T, int SHIFT, int STYLE = kIeee>
inline __attribute__((always_inline)) uint8_t decode_ieee(
    const T* __restrict src, int64_t n, int32_t bias, int32_t* __restrict sig,
    int32_t* __restrict exp, uint8_t* __restrict cls) {
  static_assert(EB + MB + 1 + SHIFT == 8 * sizeof(T), "the code fills T");
  int32_t fl = 0;
  for (int64_t k = 0; k < n; ++k) {  // masks rather than branches: vectorised
    const DecCode d = decode_code<EB, MB, SHIFT, STYLE>(src[k], bias);
    sig[k] = d.sig;
    exp[k] = d.exp;
    cls[k] = uint8_t(d.cls);
    fl |= d.cls;
  }
  return uint8_t(fl);
}

}  // namespace

MMA_SIMD_CLONES
uint8_t decode_fp16(const uint16_t* src, int64_t n, int32_t bias, int32_t* sig, int32_t* exp,
                    uint8_t* cls) {
  return decode_ieee<5, 10, uint16_t, 0>(src, n, bias, sig, exp, cls);
}

MMA_SIMD_CLONES
uint8_t decode_bf16(const uint16_t* src, int64_t n, int32_t bias, int32_t* sig, int32_t* exp,
                    uint8_t* cls) {
  return decode_ieee<8, 7, uint16_t, 0>(src, n, bias, sig, exp, cls);
}

MMA_SIMD_CLONES
uint8_t decode_fp8(DecPath path, const uint8_t* src, int64_t n, int32_t bias, int32_t* sig,
                   int32_t* exp, uint8_t* cls) {
  switch (path) {
    case DecPath::kE4m3Fn: return decode_ieee<4, 3, uint8_t, 0, kFn>(src, n, bias, sig, exp, cls);
    case DecPath::kE5m2: return decode_ieee<5, 2, uint8_t, 0, kIeee>(src, n, bias, sig, exp, cls);
    case DecPath::kE4m3Fnuz: return decode_ieee<4, 3, uint8_t, 0, kFnuz>(src, n, bias, sig, exp, cls);
    case DecPath::kE5m2Fnuz: return decode_ieee<5, 2, uint8_t, 0, kFnuz>(src, n, bias, sig, exp, cls);
    default: return 0;
  }
}

MMA_SIMD_CLONES
uint8_t decode_tf32(const uint32_t* src, int64_t n, int32_t bias, int32_t* sig, int32_t* exp,
                    uint8_t* cls) {
  return decode_ieee<8, 10, uint32_t, 13>(src, n, bias, sig, exp, cls);
}

}  // namespace mma
