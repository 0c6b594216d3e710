// The Python <-> C++ interface by name, one list per fact (X-macros), in order:
//   MMA_PARAMS       the integer parameter vector of _gemm / _sched (params.h reads it)
//   MMA_OPS          elementary operations        (torch_mma_emu.elementary.OPS)
//   MMA_RHOS         output conversions            (torch_mma_emu.elementary.RHOS)
//   MMA_NAN_STYLES   special encodings of formats  (torch_mma_emu.formats.NAN_STYLES)
//   MMA_SCHED_OPS    schedule program opcodes      (schedule.h; torch_mma_emu.schedule)
//   MMA_INSTR_KINDS  the single-instruction kernels of csrc/cuda/mma_instr.cu
//                    (torch_mma_emu.isa.KERNELS, by name; entries X("name", member))
//   MMA_INSTR_TYPES  their operand types          (torch_mma_emu.isa.KERNEL_TYPES)
// The extension exports these lists (torch_mma_emu._C._layout(), csrc/ops.cpp) and
// torch_mma_emu/cpp.py builds the parameter vector from them by name and checks at import
// that the Python names are the same sets, so the two sides cannot drift apart silently.
// MMA_PARAMS entries are X(name); the others X(python_name, cpp_enum_member).  The position
// in a list is the index or code.
#pragma once

// one format's fields; f is fa (A), fb (B), fo (output), fs (scales)
#define MMA_FORMAT_PARAMS(X, f) \
  X(f##_code) X(f##_ebits) X(f##_mbits) X(f##_bias) X(f##_nan_style) X(f##_signed) X(f##_container)

#define MMA_PARAMS(X)                                                                      \
  X(op) X(L) X(F) X(F2) X(rho) X(P) X(G) X(block) X(emax_floor) X(align_rd) X(flush_inputs) \
  X(epilogue) X(nan_lo) X(nan_hi)                                                          \
  MMA_FORMAT_PARAMS(X, fa) MMA_FORMAT_PARAMS(X, fb) MMA_FORMAT_PARAMS(X, fo)               \
  MMA_FORMAT_PARAMS(X, fs)                                                                 \
  X(passes) X(pass_width) X(c_final) X(zero_exp) X(zero_plus) X(group_keep) \
  X(tr_renorm) X(c_emin)

#define MMA_OPS(X)                                                                     \
  X(fma, kFma) X(ftz_addmul, kFtzAddMul) X(e_fdpa, kEFdpa) X(t_fdpa, kTFdpa)           \
  X(st_fdpa, kStFdpa) X(gst_fdpa, kGstFdpa) X(tr_fdpa, kTrFdpa) X(gtr_fdpa, kGtrFdpa)

#define MMA_RHOS(X)                                                                    \
  X(rz_fp32, kRzFp32) X(rz_e8m13, kRzE8m13) X(rne_fp32, kRneFp32) X(rne_fp16, kRneFp16) \
  X(rne_fp64, kRneFp64)

#define MMA_NAN_STYLES(X) X(ieee, kIeee) X(fn, kFn) X(fnuz, kFnuz) X(none, kNone) X(e8m0, kE8m0)

#define MMA_INSTR_KINDS(X)                                                             \
  X("mma.m16n8k16", kMma16816) X("mma.m16n8k8", kMma1688)                             \
  X("mma.m16n8k8.tf32", kMma1688Tf32) X("mma.m16n8k32", kMma16832)                    \
  X("wgmma.m64n8k16", kWgmma16) X("wgmma.m64n8k8.tf32", kWgmma8Tf32)                  \
  X("wgmma.m64n8k32", kWgmma32)

#define MMA_INSTR_TYPES(X) \
  X("fp16", kF16) X("bf16", kBF16) X("tf32", kTF32) X("fp8_e4m3", kE4M3) X("fp8_e5m2", kE5M2)

#define MMA_SCHED_OPS(X)                                                               \
  X(PARTIAL, kSPartial) X(C, kSC) X(ZERO, kSZero) X(ADD, kSAdd) X(NODE, kSNode)        \
  X(EPI_ALPHA, kSEpiAlpha) X(EPI_FMA, kSEpiFma) X(EPI_MULADD, kSEpiMulAdd)             \
  X(CHAIN, kSChain) X(CHAINS, kSChains)

// helpers: the enum member / the quoted Python name of an entry
#define MMA_ENUM_MEMBER(py, cpp) cpp,
#define MMA_PY_NAME(py, cpp) #py,
#define MMA_PY_STRING(py, cpp) py,
#define MMA_QUOTED(name) #name,

namespace mma {

// Indices into the parameter vector: kParam_op, kParam_L, ..., then kNumParams.
enum ParamIndex : int {
#define MMA_PARAM_INDEX(name) kParam_##name,
  MMA_PARAMS(MMA_PARAM_INDEX)
#undef MMA_PARAM_INDEX
  kNumParams
};

}  // namespace mma
