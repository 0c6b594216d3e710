// Multi-pass instructions (docs/model.md section 2.1): one instruction covers passes * L
// consecutive k and runs one fused operation per pass over the k with
// (k / pass_width) % passes == p, each rounded to the output format and carried into the
// next pass; c joins as the first pass's accumulator or in one IEEE addition at the end
// (c_final).  Example: Hopper/Blackwell mma.sync.m16n8k32 fp8 -> fp16 unpacks its fp8
// bytes into fp16 pairs and runs two HMMA.16816 over alternating pairs of k, then HADD2.
#pragma once
#include "add_out.h"
#include "fdpa.h"

namespace mma {

constexpr int kMaxPassL = 64;  // Spec.MAX_PASS_L

// Position (within an instruction) of the q-th k of pass p.
MMA_HD int pass_k(const Params& P, int p, int q) {
  const int w = P.pass_width;
  return (q / w) * (w * P.passes) + p * w + q % w;
}

// One instruction at k0: returns the new accumulator given the previous one (acc).
MMA_HD uint64_t instruction_passes(const Params& P, const OutFmt& o, const Operand& a,
                                   const Operand& b, int K, int k0, uint64_t acc,
                                   bool may_special) {
  uint64_t t = P.c_final ? 0 : acc;
  if (P.passes == 1) {
    const Chunk ch{a.shifted(k0), b.shifted(k0), imin(P.L, K - k0), k0, nullptr, nullptr};
    t = fused_op(P, o, ch, t, may_special);
  } else {
    int32_t as[kMaxPassL], ae[kMaxPassL], bs[kMaxPassL], be[kMaxPassL];
    uint8_t ac[kMaxPassL], bc[kMaxPassL];
    for (int p = 0; p < P.passes; ++p) {
      int n = 0;  // the pass's k beyond K are zero padding: leave them out
      for (int q = 0; q < P.L; ++q) {
        const int k = k0 + pass_k(P, p, q);
        if (k >= K) continue;
        as[n] = a.sig[k]; ae[n] = a.exp[k]; ac[n] = a.cls[k];
        bs[n] = b.sig[k]; be[n] = b.exp[k]; bc[n] = b.cls[k];
        ++n;
      }
      const Chunk ch{Operand{as, ae, ac}, Operand{bs, be, bc}, n, k0, nullptr, nullptr};
      t = fused_op(P, o, ch, t, may_special);
    }
  }
  return P.c_final ? epilogue_add(P, t, acc) : t;
}

}  // namespace mma
