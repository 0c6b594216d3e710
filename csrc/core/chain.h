// The GEMM chain of GUIDE section 1 for one output element: acc = C; for each chunk of L
// along K (ascending, zero padded): acc = op(a[chunk], b[chunk], acc).  With
// params.epilogue the chain starts from +0 and C is added at the end (c_mode="epilogue").
#pragma once
#include "fdpa.h"
#include "ieee.h"

namespace mma {

// IEEE addition in the output format, for c_mode="epilogue".
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

// Fused ops (t/st/gst/tr/gtr/e_fdpa) on decoded rows: a, b contiguous along K;
// sa, sb: scale decodes per K-block (or nullptr).  may_special: the row or column holds a
// NaN or an infinity, so every chunk checks the special-value rules.
MMA_HD uint64_t dot_fused(const Params& P, const Operand& a, const Operand& b, int K,
                          uint64_t c_bits, const Dec* sa, const Dec* sb, bool may_special) {
  const OutFmt o = out_fmt(P.rho);
  uint64_t acc = P.epilogue ? 0 : c_bits;
  for (int k0 = 0; k0 < K; k0 += P.L) {
    const Chunk ch{a.shifted(k0), b.shifted(k0), imin(P.L, K - k0), k0, sa, sb};
    acc = fused_op(P, o, ch, acc, may_special);
  }
  return P.epilogue ? epilogue_add(P, acc, c_bits) : acc;
}

// FMA chain (Algorithm 4) in fp32 or fp64.
template <class T>
MMA_HD T dot_fma(const Params& P, const T* a, const T* b, int K, T c) {
  T acc = P.epilogue ? T(0) : c;
  for (int k = 0; k < K; ++k) acc = fma_rn(a[k], b[k], acc);
  return P.epilogue ? add_rn(acc, c) : acc;
}

// FTZ-AddMul chain (Algorithm 2, AMD CDNA2) on fp32 values of the inputs.
MMA_HD float dot_ftz(const Params& P, const float* a, const float* b, int K, float c) {
  // input subnormals (of the input format) flush to +0
  const float tha = f32_of(uint32_t(P.fa.emin() + 127) << 23);
  const float thb = f32_of(uint32_t(P.fb.emin() + 127) << 23);
  const float tiny = f32_of(0x00800000u);  // 2^-126
  float acc = P.epilogue ? 0.0f : c;
  float p[4];
  for (int k0 = 0; k0 < K; k0 += P.P) {
    if (acc < tiny && acc > -tiny) acc = 0.0f;  // accumulator input: subnormal, -0 -> +0
    for (int l = 0; l < P.P; ++l) {
      const int k = k0 + l;
      float x = k < K ? a[k] : 0.0f, y = k < K ? b[k] : 0.0f;
      if (x < tha && x > -tha) x = 0.0f;
      if (y < thb && y > -thb) y = 0.0f;
      p[l] = ftz_keep_sign(mul_rn(x, y));
    }
    float s = ftz_keep_sign(add_rn(p[0], p[1]));
    if (P.P == 4) s = ftz_keep_sign(add_rn(s, ftz_keep_sign(add_rn(p[2], p[3]))));
    acc = ftz_keep_sign(add_rn(acc, s));
  }
  return P.epilogue ? add_rn(acc, c) : acc;
}

}  // namespace mma
