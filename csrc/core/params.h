// The flat parameter vector written by torch_mma_emu.spec.Spec.to_params, as a POD struct.
#pragma once
#include "common.h"

namespace mma {

enum Op : int32_t { kFma = 0, kFtzAddMul, kEFdpa, kTFdpa, kStFdpa, kGstFdpa, kTrFdpa, kGtrFdpa };
enum Rho : int32_t { kRzFp32 = 0, kRzE8m13, kRneFp32, kRneFp16, kRneFp64 };
enum NanStyle : int32_t { kIeee = 0, kFn, kFnuz, kNone, kE8m0 };

struct FormatDesc {
  int32_t code, ebits, mbits, bias, nan_style, is_signed, container;
  MMA_HD int32_t emin() const { return nan_style == kE8m0 ? -bias : 1 - bias; }
};

struct Params {
  int32_t op, L, F, F2, rho, P, G, block, emax_floor, align_rd, flush_inputs, epilogue;
  uint64_t nan_bits;
  FormatDesc fa, fb, fo, fs;
  // Multi-pass instructions (passes.h), appended after the fields above:
  // passes = 1 and c_final = 0 is the single fused chain.  Fast paths that only know the
  // single chain must skip any Params with multipass() true.
  int32_t passes, pass_width, c_final;
  MMA_HD bool multipass() const { return passes > 1 || c_final; }
};

constexpr int kNumParams = 14 + 4 * 7 + 3;

inline Params parse_params(const int64_t* v) {
  Params p;
  p.op = int32_t(v[0]); p.L = int32_t(v[1]); p.F = int32_t(v[2]); p.F2 = int32_t(v[3]);
  p.rho = int32_t(v[4]); p.P = int32_t(v[5]); p.G = int32_t(v[6]); p.block = int32_t(v[7]);
  p.emax_floor = int32_t(v[8]); p.align_rd = int32_t(v[9]); p.flush_inputs = int32_t(v[10]);
  p.epilogue = int32_t(v[11]);
  p.nan_bits = (uint64_t(uint32_t(v[13])) << 32) | uint64_t(uint32_t(v[12]));
  FormatDesc* fs[4] = {&p.fa, &p.fb, &p.fo, &p.fs};
  for (int i = 0; i < 4; ++i) {
    const int64_t* f = v + 14 + 7 * i;
    *fs[i] = FormatDesc{int32_t(f[0]), int32_t(f[1]), int32_t(f[2]), int32_t(f[3]),
                        int32_t(f[4]), int32_t(f[5]), int32_t(f[6])};
  }
  p.passes = int32_t(v[42]); p.pass_width = int32_t(v[43]); p.c_final = int32_t(v[44]);
  return p;
}

}  // namespace mma
