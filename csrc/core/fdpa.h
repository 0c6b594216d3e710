// The fused elementary operations of seed 003 (Algorithms 6-11) on decoded operands.
// See docs/model.md for every corner decided here.  All arithmetic is exact integer
// fixed point; the truncated sums fit in int64 for every Spec the validator accepts.
#pragma once
#include "decode.h"
#include "round.h"
#include "wideacc.h"

namespace mma {

// Decoded operands along K, structure of arrays (see Dec): zeros have exp = kZeroExp.
struct Operand {
  const int32_t* sig;
  const int32_t* exp;
  const uint8_t* cls;
  MMA_HD Operand shifted(int k) const { return Operand{sig + k, exp + k, cls + k}; }
};

// One chunk of operands.  a[k], b[k] for k < n (the rest of the chunk is zero padding);
// sa, sb: the scale decodes of the K-blocks, indexed by (k0 + k) / block.
struct Chunk {
  Operand a;
  Operand b;
  int n;
  int k0;
  const Dec* sa;
  const Dec* sb;
};

// Special-value rules (docs/model.md section 3).  Returns true and sets *out when the
// result is NaN or an infinity.
MMA_HD bool chunk_specials(const Params& P, const OutFmt& o, const Chunk& ch, const Dec& c,
                           uint64_t* out) {
  bool nan = c.cls == kNan, pinf = false, ninf = false;
  if (c.cls == kInf) (c.sig < 0 ? ninf : pinf) = true;
  const int32_t fab = P.fa.mbits + P.fb.mbits;
  for (int k = 0; k < ch.n; ++k) {
    const Dec x{ch.a.sig[k], ch.a.exp[k], ch.a.cls[k]};
    const Dec y{ch.b.sig[k], ch.b.exp[k], ch.b.cls[k]};
    if (x.cls == kNan || y.cls == kNan) { nan = true; break; }
    if (x.cls == kInf || y.cls == kInf) {
      if ((x.cls == kFinite && x.sig == 0) || (y.cls == kFinite && y.sig == 0)) { nan = true; break; }
      ((x.sig < 0) != (y.sig < 0) ? ninf : pinf) = true;
    } else if (P.op == kTrFdpa && x.sig && y.sig) {
      // seed 003 section 4.2: TR-FDPA products overflow to infinity at 2^128
      const int64_t p = int64_t(x.sig) * y.sig;
      const int32_t top = x.exp + y.exp - fab + bitlen64(uint64_t(p < 0 ? -p : p)) - 1;
      if (top >= 128) (p < 0 ? ninf : pinf) = true;
    }
  }
  if (!nan && ch.sa) {
    const int last = (ch.k0 + (ch.n ? ch.n - 1 : 0)) / P.block;
    for (int kb = ch.k0 / P.block; kb <= last; ++kb)
      if (ch.sa[kb].cls == kNan || ch.sb[kb].cls == kNan) { nan = true; break; }
  }
  if (nan || (pinf && ninf)) { *out = P.nan_bits; return true; }
  if (pinf || ninf) { *out = inf_bits(o, ninf); return true; }
  return false;
}

MMA_HD int32_t floor_exp(const Params& P, int32_t e) { return imax(e, P.emax_floor); }

// Exponent of product k, with the block scales for ST-FDPA.  Zero operands carry kZeroExp,
// so a zero product never wins the maximum.
MMA_HD int32_t prod_exp(const Params& P, const Chunk& ch, int k) {
  int32_t e = ch.a.exp[k] + ch.b.exp[k];
  if (ch.sa) {
    const int kb = (ch.k0 + k) / P.block;
    e += ch.sa[kb].exp + ch.sb[kb].exp;
  }
  return e;
}

// sum_k RZ(p_k * 2^(e_k - emax)) on the grid 2^-F.  With G = F - fab >= 0 every term is
// (|p| << G) >> (emax - e): no left shifts depend on data and |p| << G < 2^(F + 2).
MMA_HD int64_t sum_products_rz(const Params& P, const Chunk& ch, int32_t emax, int first, int step) {
  const int32_t G = P.F - (P.fa.mbits + P.fb.mbits);
  int64_t S = 0;
  if (G >= 0) {
    for (int k = first; k < ch.n; k += step) {
      const int64_t p = int64_t(ch.a.sig[k]) * ch.b.sig[k];
      const int32_t d = imin(emax - prod_exp(P, ch, k), 63);
      const int64_t t = int64_t((uint64_t(p < 0 ? -p : p) << G) >> d);
      S += p < 0 ? -t : t;
    }
  } else {
    for (int k = first; k < ch.n; k += step) {
      const int64_t p = int64_t(ch.a.sig[k]) * ch.b.sig[k];
      const int32_t d = imin(emax - prod_exp(P, ch, k) - G, 63);
      const int64_t t = int64_t(uint64_t(p < 0 ? -p : p) >> d);
      S += p < 0 ? -t : t;
    }
  }
  return S;
}

// T-FDPA (Algorithm 7) and ST-FDPA (Algorithm 8): scale exponents join the products.
MMA_HD uint64_t t_fdpa(const Params& P, const OutFmt& o, const Chunk& ch, const Dec& c) {
  int32_t emax = c.exp;  // kZeroExp when c == 0
  bool zero_term = c.sig == 0 || ch.n < P.L;  // K padding is zero operands
  for (int k = 0; k < ch.n; ++k) {
    emax = imax(emax, prod_exp(P, ch, k));
    zero_term |= ch.a.sig[k] == 0 || ch.b.sig[k] == 0;
  }
  if (zero_term && P.has_zero_exp()) emax = imax(emax, P.zero_exp);
  emax = floor_exp(P, emax);
  const int64_t S = shift_rz(c.sig, emax - c.exp + P.fo.mbits - P.F) + sum_products_rz(P, ch, emax, 0, 1);
  return round_fixed(S, emax - P.F, o);
}

// GST-FDPA (Algorithm 9): exact dot per group of G, times the block scales' significands.
MMA_HD uint64_t gst_fdpa(const Params& P, const OutFmt& o, const Chunk& ch, const Dec& c) {
  const int32_t ea0 = P.fa.emin(), eb0 = P.fb.emin();
  // group terms are Q * 2^(e_g - fo)
  const int32_t fo = P.fa.mbits + P.fb.mbits - ea0 - eb0 + P.fs.mbits * 2;
  const int ngroups = P.L / P.G;
  int64_t q[256];
  int32_t eg[256];
  int32_t emax = c.exp;
  bool zero_term = c.sig == 0;
  for (int g = 0; g < ngroups; ++g) {
    const int kbeg = g * P.G;
    int64_t acc = 0;
    bool any = false;  // some product of the group is nonzero
    for (int k = kbeg; k < kbeg + P.G && k < ch.n; ++k) {
      if (ch.a.sig[k] == 0 || ch.b.sig[k] == 0) continue;
      any = true;
      acc += int64_t(ch.a.sig[k]) * ch.b.sig[k] *
             (int64_t(1) << ((ch.a.exp[k] - ea0) + (ch.b.exp[k] - eb0)));
    }
    q[g] = 0;
    if (kbeg >= ch.n) { zero_term = true; continue; }  // wholly K padding: zero operands
    const int kb = (ch.k0 + kbeg) / P.block;
    const Dec& al = ch.sa[kb];
    const Dec& be = ch.sb[kb];
    // a zero group (no nonzero product, or a zero scale) is a zero term; a group whose
    // products cancel to 0 keeps its scale exponent only with group_keep (section 6)
    if (!any || al.sig == 0 || be.sig == 0) { zero_term = true; continue; }
    if (acc == 0 && P.group_keep) emax = imax(emax, al.exp + be.exp);
    q[g] = acc * al.sig * be.sig;
    if (q[g] == 0) continue;
    eg[g] = al.exp + be.exp;
    emax = imax(emax, eg[g]);
  }
  if (zero_term && P.has_zero_exp()) emax = imax(emax, P.zero_exp);
  emax = floor_exp(P, emax);
  int64_t S = shift_rz(c.sig, emax - c.exp + P.fo.mbits - P.F);
  for (int g = 0; g < ngroups; ++g)
    if (q[g]) S += shift_rz(q[g], emax - eg[g] + fo - P.F);
  return round_fixed(S, emax - P.F, o);
}

// Truncated sum of the products with index k = first, first+step, ... (at its own max
// exponent, returned in *emax_out).  Shared by TR-FDPA (step 1) and GTR-FDPA (step 2).
MMA_HD int64_t products_rz(const Params& P, const Chunk& ch, int first, int step,
                           int32_t* emax_out) {
  int32_t emax = kZeroExp;
  for (int k = first; k < ch.n; k += step) emax = imax(emax, prod_exp(P, ch, k));
  emax = floor_exp(P, emax);
  *emax_out = emax;
  return sum_products_rz(P, ch, emax, first, step);
}

MMA_HD int64_t round_dir(const Params& P, int64_t v, int32_t s) {
  return P.align_rd ? shift_rd(v, s) : shift_rz(v, s);
}

// tr_renorm (docs/model.md section 6.5): c = 0 takes fp32's emin in E; T' keeps F2 + 1
// fraction bits; T' + c' is renormalised and rounded down to F2 fraction bits below its
// leading bit (not below emin - F2), then rounded to the output.
MMA_HD uint64_t tr_finish_renorm(const Params& P, const OutFmt& o, int64_t T, int32_t emax,
                                 const Dec& c, bool special_trunc) {
  const int32_t E = imax(emax, c.sig ? c.exp : o.emin);
  if (T == 0 && c.sig == 0) return 0;
  int32_t lsb = E - P.F2 - 1;
  const int64_t Tp = round_dir(P, T, lsb - (emax - P.F));
  int64_t cp = c.sig ? round_dir(P, c.sig, (E - P.F) - (c.exp - P.fo.mbits)) : 0;
  if (special_trunc && c.sig && c.exp < E - P.F - 1) cp = 0;
  int64_t S = Tp + cp * (int64_t(1) << (P.F2 + 1 - P.F));
  if (S == 0) return 0;
  const int32_t top = lsb + bitlen64(uint64_t(S < 0 ? -S : S)) - 1;
  const int32_t keep = imax(top, o.emin) - P.F2;
  if (keep > lsb) {
    S = round_dir(P, S, keep - lsb);
    lsb = keep;
  }
  return round_fixed(S, lsb, o);
}

// Final step of TR/GTR-FDPA: T (grid 2^(emax-F)) and c, aligned at E = max(emax, e_c).
MMA_HD uint64_t tr_finish(const Params& P, const OutFmt& o, int64_t T, int32_t emax,
                          const Dec& c, bool special_trunc) {
  if (P.tr_renorm) return tr_finish_renorm(P, o, T, emax, c, special_trunc);
  const int32_t E = imax(emax, c.exp);
  if (T == 0 && c.sig == 0) return 0;
  const int64_t Tp = round_dir(P, T, (E - P.F2) - (emax - P.F));
  int64_t cp = round_dir(P, c.sig, (E - P.F) - (c.exp - P.fo.mbits));
  if (special_trunc && c.exp < E - P.F - 1) cp = 0;
  const int64_t S = Tp + cp * (int64_t(1) << (P.F2 - P.F));
  return round_fixed(S, E - P.F2, o);
}

// TR-FDPA (Algorithm 10, AMD CDNA3 tf32/bf16/fp16).
MMA_HD uint64_t tr_fdpa(const Params& P, const OutFmt& o, const Chunk& ch, const Dec& c) {
  int32_t emax;
  const int64_t T = products_rz(P, ch, 0, 1, &emax);
  return tr_finish(P, o, T, emax, c, false);
}

// GTR-FDPA (Algorithm 11, AMD CDNA3 fp8).
MMA_HD uint64_t gtr_fdpa(const Params& P, const OutFmt& o, const Chunk& ch, const Dec& c) {
  int32_t ee, eo;
  const int64_t Te = products_rz(P, ch, 0, 2, &ee);
  const int64_t To = products_rz(P, ch, 1, 2, &eo);
  const int32_t emax = imax(ee, eo);
  const int64_t T = round_dir(P, Te, emax - ee) + round_dir(P, To, emax - eo);
  return tr_finish(P, o, T, emax, c, true);
}

// E-FDPA (Algorithm 6, AMD CDNA1): exact sum, one RNE rounding.
MMA_HD uint64_t e_fdpa(const Params& P, const OutFmt& o, const Chunk& ch, const Dec& c) {
  WideAcc acc;
  const int32_t fab = P.fa.mbits + P.fb.mbits;
  if (c.sig) acc.add(c.sig, c.exp - P.fo.mbits);
  for (int k = 0; k < ch.n; ++k)
    if (ch.a.sig[k] && ch.b.sig[k])
      acc.add(int64_t(ch.a.sig[k]) * ch.b.sig[k], ch.a.exp[k] + ch.b.exp[k] - fab);
  return acc.round(o);
}

// zero_plus: a zero result of T/ST/GST-FDPA is +0 (docs/model.md section 6)
MMA_HD uint64_t plus_zero(const Params& P, const OutFmt& o, uint64_t r) {
  return P.zero_plus && r == uint64_t(1) << (o.cbits - 1) ? 0 : r;
}

// One fused elementary op with its special-value rules.
MMA_HD uint64_t fused_op(const Params& P, const OutFmt& o, const Chunk& ch, uint64_t c_bits,
                         bool check_specials) {
  Dec c = decode(P.fo, c_bits);
  // C read by the first instruction in a narrower format (c_emin): its value, exact, at
  // that format's minimum exponent (the low bits shifted out are zero)
  if (ch.k0 == 0 && P.has_c_emin() && c.sig && c.cls == kFinite && c.exp < P.c_emin) {
    c.sig >>= imin(P.c_emin - c.exp, 31);
    c.exp = P.c_emin;
  }
  uint64_t out;
  // TR-FDPA products can overflow without any infinite input, so it always checks.
  if ((check_specials || c.cls != kFinite || P.op == kTrFdpa) && chunk_specials(P, o, ch, c, &out))
    return out;
  switch (P.op) {
    case kTFdpa:
    case kStFdpa: return plus_zero(P, o, t_fdpa(P, o, ch, c));
    case kGstFdpa: return plus_zero(P, o, gst_fdpa(P, o, ch, c));
    case kTrFdpa: return tr_fdpa(P, o, ch, c);
    case kGtrFdpa: return gtr_fdpa(P, o, ch, c);
    case kEFdpa: return e_fdpa(P, o, ch, c);
    default: return P.nan_bits;  // not a fused op: NaN, never another op's plausible bits
  }
}

// A new elementary operation (layout.h MMA_OPS) needs a case in fused_op above and in the
// CUDA launch switch (gemm_cuda.cu), its reference (reference/ops.py) and the steps of
// docs/design.md "How to add"; this count makes adding it to MMA_OPS alone a compile error.
#define MMA_COUNT_OP(py, cpp) +1
static_assert(0 MMA_OPS(MMA_COUNT_OP) == 8,
              "new elementary op: add it to fused_op (fdpa.h) and gemm_cuda.cu's launch "
              "switch (docs/design.md, How to add), then update this count");
#undef MMA_COUNT_OP

}  // namespace mma
