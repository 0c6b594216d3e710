// A register-friendly T-FDPA chunk (seed 003 Algorithm 7) for the CUDA kernel's hot path.
//
// It returns exactly what the core's fused_op(P, o, chunk, c_bits, false) returns for an
// unscaled t_fdpa chunk whose a and b hold no NaN and no infinity (the kernel only takes it
// for rows and columns whose special-value flags are clear; everything else goes through
// fused_op itself).  What differs from csrc/core/fdpa.h is only how the truncated sum is
// held, never what it is:
//
//  * the chunk has a compile-time length L (zero-padded past K: a zero operand has
//    exp = kZeroExp, so a padding product never wins the maximum and adds 0);
//  * a's significands arrive pre-multiplied by 2^G (G = F - ma - mb >= 0), so
//    p' = (a 2^G) b = sign(ab) |ab| 2^G, and |p'| < 2^(ma+1) 2^(mb+1) 2^G = 2^(F+2)
//    <= 2^31 when F <= 29: p' fits an int32;
//  * (|p'| >> min(d, 31)) equals the core's (|p| << G) >> min(d, 63) in uint64: equal for
//    d <= 31 because |p'| < 2^31, and both are 0 for d >= 31;
//  * the L signed terms sum exactly in an int32 when L 2^(F+2) <= 2^31 (every term is
//    below 2^(F+2) in magnitude), otherwise (WIDE) in an int64; the c term and the final
//    sum are int64 as in the core, and integer addition is exact, so the order is free.
//
// Decoding c, the emax floor, the c alignment and the final conversion are the core's own
// functions.  csrc/cuda/fast_tfdpa_check.cpp (run by tests/test_gpu_fastpath_host.py on the
// CPU) compares this function with fused_op over every eligible registry entry.
#pragma once
#include <type_traits>

#include "../core/fdpa.h"

namespace mma {

struct FastTfdpa {
  bool ok;     // the fast chunk applies to this Params
  bool wide;   // the L terms need an int64 sum
  int32_t G;   // F - ma - mb
};

// Which Params the fast chunk reproduces.  L must be one of the instantiated lengths.
MMA_HD FastTfdpa fast_tfdpa_plan(const Params& P) {
  FastTfdpa f{false, false, 0};
  if (P.op != kTFdpa || P.multipass() || P.has_c_emin()) return f;  // the generic kernel
  if (!(P.L == 4 || P.L == 8 || P.L == 16 || P.L == 32)) return f;
  f.G = P.F - (P.fa.mbits + P.fb.mbits);
  if (f.G < 0 || P.F > 29) return f;
  int lg = 0;
  while ((1 << lg) < P.L) ++lg;
  f.wide = P.F + 2 + lg > 31;
  f.ok = true;
  return f;
}

// One chunk.  asg[k] = a_sig[k] * 2^G, ae[k] = a_exp[k], bs[k] = b_sig[k], be[k] = b_exp[k]
// (core Dec encoding: zero has sig 0 and exp kZeroExp), for k < L.
template <int L, bool WIDE>
MMA_HD uint64_t fast_tfdpa_chunk(const Params& P, const OutFmt& o, const int32_t* asg,
                                 const int32_t* ae, const int32_t* bs, const int32_t* be,
                                 uint64_t c_bits) {
  const Dec c = decode(P.fo, c_bits);
  if (c.cls != kFinite) {
    // a and b are finite here, so only c decides (chunk_specials on an empty chunk).
    const Operand none{nullptr, nullptr, nullptr};
    const Chunk empty{none, none, 0, 0, nullptr, nullptr};
    uint64_t out = P.nan_bits;
    chunk_specials(P, o, empty, c, &out);
    return out;
  }
  int32_t emax = c.exp;  // kZeroExp when c == 0
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int k = 0; k < L; ++k) emax = imax(emax, ae[k] + be[k]);
  if (P.has_zero_exp()) {  // Spec.zero_exp: zero operands (K padding too) and c = 0
    bool zt = c.sig == 0;
    for (int k = 0; k < L; ++k) zt |= ae[k] == kZeroExp || be[k] == kZeroExp;
    if (zt) emax = imax(emax, P.zero_exp);
  }
  emax = floor_exp(P, emax);
  using Acc = typename std::conditional<WIDE, int64_t, int32_t>::type;
  Acc S = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int k = 0; k < L; ++k) {
    const int32_t p = asg[k] * bs[k];                      // |p| < 2^31
    const uint32_t m = uint32_t(p < 0 ? -p : p);
    const int32_t d = imin(emax - ae[k] - be[k], 31);       // >= 0
    const uint32_t t = m >> d;
    const int32_t s = p >> 31;                              // 0 or -1 (C++20: arithmetic)
    S += Acc(int32_t(t ^ uint32_t(s)) - s);                 // sign(p) * t
  }
  const int64_t T = shift_rz(c.sig, emax - c.exp + P.fo.mbits - P.F) + int64_t(S);
  return plus_zero(P, o, round_fixed(T, emax - P.F, o));
}

}  // namespace mma
