// The flat parameter vector written by torch_mma_emu/cpp.py (Spec.param_values by name, in
// the order of MMA_PARAMS, layout.h), as a POD struct.
#pragma once
#include "common.h"
#include "layout.h"

namespace mma {

enum Op : int32_t { MMA_OPS(MMA_ENUM_MEMBER) };
enum Rho : int32_t { MMA_RHOS(MMA_ENUM_MEMBER) };
enum NanStyle : int32_t { MMA_NAN_STYLES(MMA_ENUM_MEMBER) };

struct FormatDesc {
  int32_t code, ebits, mbits, bias, nan_style, is_signed, container;
  MMA_HD int32_t emin() const { return nan_style == kE8m0 ? -bias : 1 - bias; }
};

struct Params {
  int32_t op, L, F, F2, rho, P, G, block, emax_floor, align_rd, flush_inputs, epilogue;
  uint64_t nan_bits;
  FormatDesc fa, fb, fo, fs;
  // Multi-pass instructions (passes.h): passes = 1 and c_final = 0 is the single fused
  // chain.  Fast paths that only know the single chain must skip any Params with
  // multipass() true.
  int32_t passes, pass_width, c_final;
  // The zero corners (docs/model.md section 6): zero_exp is the exponent zero terms take in
  // the alignment maximum (kNoZeroExp: they take none); zero_plus writes a zero result of
  // T/ST/GST-FDPA as +0; group_keep lets a GST group whose products cancel to 0 keep its
  // scale exponent in the maximum.
  int32_t zero_exp, zero_plus, group_keep;
  // TR/GTR-FDPA: T' kept at F2 + 1 bits, c = 0 at fp32's emin in E, and T' + c' renormalised
  // and rounded down to F2 fraction bits before the final rounding (section 6.5)
  int32_t tr_renorm;
  // The least exponent of the incoming c term in the first chunk (k0 = 0): C read in a
  // narrower format than the output by the instruction (Volta's m8n8k4.f32.f16.f16.f16: an
  // fp16 subnormal C aligned at fp16's emin -14, section 6.4); kNoZeroExp: none.
  int32_t c_emin;
  MMA_HD bool has_c_emin() const { return c_emin > kNoZeroExp; }
  MMA_HD bool multipass() const { return passes > 1 || c_final; }
  MMA_HD bool has_zero_exp() const { return zero_exp > kNoZeroExp; }
};

inline Params parse_params(const int64_t* v) {
#define MMA_P(name) int32_t(v[kParam_##name])
#define MMA_FORMAT(f)                                                                 \
  FormatDesc { MMA_P(f##_code), MMA_P(f##_ebits), MMA_P(f##_mbits), MMA_P(f##_bias), \
               MMA_P(f##_nan_style), MMA_P(f##_signed), MMA_P(f##_container) }
  Params p;
  p.op = MMA_P(op); p.L = MMA_P(L); p.F = MMA_P(F); p.F2 = MMA_P(F2); p.rho = MMA_P(rho);
  p.P = MMA_P(P); p.G = MMA_P(G); p.block = MMA_P(block); p.emax_floor = MMA_P(emax_floor);
  p.align_rd = MMA_P(align_rd); p.flush_inputs = MMA_P(flush_inputs);
  p.epilogue = MMA_P(epilogue);
  p.nan_bits = (uint64_t(uint32_t(v[kParam_nan_hi])) << 32) | uint64_t(uint32_t(v[kParam_nan_lo]));
  p.fa = MMA_FORMAT(fa); p.fb = MMA_FORMAT(fb); p.fo = MMA_FORMAT(fo); p.fs = MMA_FORMAT(fs);
  p.passes = MMA_P(passes); p.pass_width = MMA_P(pass_width); p.c_final = MMA_P(c_final);
  p.zero_exp = MMA_P(zero_exp); p.zero_plus = MMA_P(zero_plus); p.group_keep = MMA_P(group_keep);
  p.tr_renorm = MMA_P(tr_renorm);
  p.c_emin = MMA_P(c_emin);
#undef MMA_FORMAT
#undef MMA_P
  return p;
}

}  // namespace mma
