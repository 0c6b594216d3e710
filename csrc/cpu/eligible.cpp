// The one eligibility test of the CPU fast paths (fdpa_engine.h): which vector kernel serves a
// parameter vector.  No torch here.
#include "fdpa_engine.h"

namespace mma {

// Formats whose values are exact fp32 numbers built as sig * 2^(exp - mbits) from the plane
// window |exp| <= 31 and whose pairwise products are exact in fp32 (<= 24 significand bits).
static bool plane_format(const FormatDesc& f) {
  return f.ebits >= 1 && f.mbits >= 0 && f.mbits <= 10 && f.nan_style != kE8m0 &&
         (f.container == 0 || f.container == 8 || f.container == 16 || f.container == 32);
}

FastKind fast_eligible(const Params& P) {
  if (P.has_c_emin()) return FastKind::kNone;  // a narrow C's first chunk: the core only
  // multi-pass instructions (core passes.h): the planes hold each instruction's k pass by
  // pass; T-, E-, TR-, GTR-FDPA kernels run the passes and the final c addition
  if (P.multipass() && (P.passes < 1 || P.L * P.passes > 256 || (P.passes > 1 && P.L > kMaxPassL) ||
                        P.pass_width < 1 || P.L % P.pass_width != 0 || P.op == kStFdpa ||
                        P.op == kGstFdpa))
    return FastKind::kNone;
  switch (P.op) {
    case kFma:
      // a chain of IEEE fma per lane: only the output precision and the epilogue matter
      return (P.rho == kRneFp32 || P.rho == kRneFp64) ? FastKind::kFma : FastKind::kNone;
    case kFtzAddMul:
      return (P.rho == kRneFp32 && (P.P == 2 || P.P == 4) && P.fa.ebits > 0 && P.fb.ebits > 0)
                 ? FastKind::kFtz : FastKind::kNone;
    case kTFdpa:
    case kStFdpa: {
      // terms |t| < 2^(F+2) must fit int32; RZ fp32 / E8M13 or RNE fp16 accumulator
      if (P.F < 1 || P.F > 29 || P.L < 1 || P.L > 256) return FastKind::kNone;
      if (P.rho == kRzFp32 || P.rho == kRzE8m13) {
        if (P.fo.ebits != 8 || P.fo.mbits != 23 || P.fo.nan_style != kIeee) return FastKind::kNone;
      } else if (P.rho == kRneFp16) {
        if (P.fo.ebits != 5 || P.fo.mbits != 10 || P.fo.nan_style != kIeee) return FastKind::kNone;
      } else {
        return FastKind::kNone;
      }
      if (!plane_format(P.fa) || !plane_format(P.fb)) return FastKind::kNone;
      if ((P.fa.mbits + 1) + (P.fb.mbits + 1) > 24) return FastKind::kNone;
      if (P.flush_inputs) return FastKind::kNone;
      if (P.op == kStFdpa && (P.fs.nan_style != kE8m0 || P.block < 1)) return FastKind::kNone;
      return FastKind::kFdpa;
    }
    case kTrFdpa:
    case kGtrFdpa: {
      // int32 product sums (per parity for GTR) without overflow; |S| < 2^(F2 + 2 + log2 L)
      // exact in fp64; fp32 accumulator rounded to nearest
      if (P.F < 1 || P.F > 29 || P.L < 1 || P.L > (1 << (29 - P.F))) return FastKind::kNone;
      if (P.F2 < P.F || P.F2 > 40 || P.rho != kRneFp32) return FastKind::kNone;
      if (P.fo.ebits != 8 || P.fo.mbits != 23 || P.fo.nan_style != kIeee) return FastKind::kNone;
      if (!plane_format(P.fa) || !plane_format(P.fb)) return FastKind::kNone;
      if ((P.fa.mbits + 1) + (P.fb.mbits + 1) > 24 || P.flush_inputs) return FastKind::kNone;
      // T' (< 2^(32 + G - F), G = F2 or, with tr_renorm, F2 + 1 grid bits) and c' 2^(G - F)
      // exact fp64 integers below 2^52, so S = T' + c' is exact
      if (P.F2 + (P.tr_renorm ? 1 : 0) - P.F > 20) return FastKind::kNone;
      return FastKind::kTr;
    }
    case kEFdpa:
      // values exact in fp32 planes, products exact in fp64 (<= 53 significand bits)
      if (P.rho != kRneFp32 || P.fo.ebits != 8 || P.fo.mbits != 23 || P.fo.nan_style != kIeee)
        return FastKind::kNone;
      if (P.L < 1 || P.L > 256 || P.flush_inputs) return FastKind::kNone;
      if (!plane_format(P.fa) || !plane_format(P.fb) || P.fa.ebits > 8 || P.fb.ebits > 8)
        return FastKind::kNone;
      return FastKind::kE;
    case kGstFdpa: {
      // a group's dot must be exact in fp32: exponent spans + significand bits + log2 G <= 24
      auto span = [](const FormatDesc& f) { return (1 << f.ebits) - 1 + f.mbits + 1; };
      int lg = 0;
      while ((1 << lg) < P.G) ++lg;
      if (P.G < 1 || P.L % P.G != 0 || P.L / P.G > 16 || P.block < 1 || P.block % P.G != 0)
        return FastKind::kNone;
      if (P.F < 1 || P.F > 38 || P.rho != kRzFp32 || P.fo.ebits != 8 || P.fo.mbits != 23 ||
          P.fo.nan_style != kIeee || P.flush_inputs)
        return FastKind::kNone;
      if (!plane_format(P.fa) || !plane_format(P.fb) || span(P.fa) + span(P.fb) + lg > 24)
        return FastKind::kNone;
      if (P.fs.ebits < 1 || P.fs.mbits > 8) return FastKind::kNone;
      return FastKind::kGst;
    }
    default:
      return FastKind::kNone;
  }
}

}  // namespace mma
