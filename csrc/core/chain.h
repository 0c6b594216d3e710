// The GEMM chain (docs/model.md, "The GEMM chain") for one output element: acc = C; for
// each chunk of L along K (ascending, zero padded): acc = op(a[chunk], b[chunk], acc).  With
// params.epilogue the chain starts from +0 and C is added at the end (c_mode="epilogue").
// Multi-pass instructions (params.passes, c_final) run through passes.h.
#pragma once
#include "add_out.h"
#include "fdpa.h"
#include "passes.h"

namespace mma {

// Fused ops (t/st/gst/tr/gtr/e_fdpa) on decoded rows: a, b contiguous along K;
// sa, sb: scale decodes per K-block (or nullptr).  may_special: the row or column holds a
// NaN or an infinity, so every chunk checks the special-value rules.
MMA_HD uint64_t dot_fused(const Params& P, const Operand& a, const Operand& b, int K,
                          uint64_t c_bits, const Dec* sa, const Dec* sb, bool may_special) {
  const OutFmt o = out_fmt(P.rho);
  uint64_t acc = P.epilogue ? 0 : c_bits;
  if (P.multipass()) {  // passes.h: several fused passes per instruction and/or c added last
    const int step = P.L * P.passes;
    for (int k0 = 0; k0 < K; k0 += step)
      acc = instruction_passes(P, o, a, b, K, k0, acc, may_special);
    return P.epilogue ? epilogue_add(P, acc, c_bits) : acc;
  }
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

// One FTZ-AddMul group (Algorithm 2, AMD CDNA2): P products k0..k0+P-1 (k >= K are zero
// padding) added pairwise to acc, all on fp32 values.  acc is taken as it is: the caller
// flushes it where an instruction starts.
MMA_HD float ftz_group(const Params& P, const float* a, const float* b, int k0, int K,
                       float acc) {
  // input subnormals (of the input format) flush to +0
  const float tha = f32_of(uint32_t(P.fa.emin() + 127) << 23);
  const float thb = f32_of(uint32_t(P.fb.emin() + 127) << 23);
  float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int l = 0; l < P.P; ++l) {
    const int k = k0 + l;
    float x = k < K ? a[k] : 0.0f, y = k < K ? b[k] : 0.0f;
    if (x < tha && x > -tha) x = 0.0f;
    if (y < thb && y > -thb) y = 0.0f;
    p[l] = ftz_keep_sign(mul_rn(x, y));
  }
  float s = ftz_keep_sign(add_rn(p[0], p[1]));
  if (P.P == 4) s = ftz_keep_sign(add_rn(s, ftz_keep_sign(add_rn(p[2], p[3]))));
  return ftz_keep_sign(add_rn(acc, s));
}

// The accumulator input of an FTZ-AddMul instruction: subnormal, -0 -> +0 (NaN stays).
MMA_HD float ftz_acc_in(float acc) {
  const float tiny = f32_of(0x00800000u);  // 2^-126
  return (acc < tiny && acc > -tiny) ? 0.0f : acc;
}

// FTZ-AddMul chain on fp32 values of the inputs: instructions of L products (the last one
// zero padded to L, its padding groups run too), each flushing its accumulator input once
// and adding its groups of P (docs/model.md 5, MMA-Sim's flush per instruction: section 6.6;
// L = P is the old flush per group).
MMA_HD float dot_ftz(const Params& P, const float* a, const float* b, int K, float c) {
  float acc = P.epilogue ? 0.0f : c;
  const int Kp = (K + P.L - 1) / P.L * P.L;
  for (int k0 = 0; k0 < Kp; k0 += P.P) {
    if (k0 % P.L == 0) acc = ftz_acc_in(acc);
    acc = ftz_group(P, a, b, k0, K, acc);
  }
  return P.epilogue ? add_rn(acc, c) : acc;
}

}  // namespace mma
