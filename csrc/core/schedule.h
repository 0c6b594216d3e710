// Per-output-element interpreter of a schedule program (torch_mma_emu/schedule.py compiles
// a Schedule or an FPRev SumTree into it; the opcodes by name: MMA_SCHED_OPS, layout.h).
// A small postfix stack machine over exact values (doubles hold every fp16/fp32/fp64 value
// exactly):
//
//   PARTIAL s         push partial result s (a slice or block chain computed by _gemm)
//   C                 push C[i, j]
//   ZERO              push +0
//   ADD               pop y, x; push x + y, an IEEE addition in the workspace format
//   NODE n acc w k_1 slot_1 .. k_n slot_n
//                     one elementary operation of the arch (Params) over the products
//                     a[i, k_t] * b[k_t, j] placed at slot_t of a chunk of width w, with
//                     accumulator input: the popped value (acc = 1) or +0 (acc = 0)
//   EPI_ALPHA         top = alpha * top                     (workspace format)
//   EPI_FMA           top = fma(alpha, top, beta * C)       (workspace format)
//   EPI_MULADD        top = (alpha * top) + (beta * C)      (workspace format)
//   CHAIN k0 k1 c     push the arch's plain chain over the products [k0, k1) started from
//                     C (c = 1) or +0 (c = 0): a split-K slice or a promotion block; c = 2:
//                     the chain goes on from the top value (replaced, not pushed).  Its
//                     instruction groups are counted from k0, a short last one zero-padded,
//                     so an unscaled chain may start and end off the grid (a CUTLASS residue
//                     tile, then the mainloop from where it ends).  The
//                     CPU kernel runs these row-wise (cpu/sched_cpu.cpp); the per-element
//                     interpreter below never sees them (the Python side computes the
//                     chains with _gemm and passes them as PARTIALs elsewhere).
//   CHAINS k0 k1 s    top = top + chain_1 + chain_2 + ... (ADDs in that order): the chains
//                     from +0 over [k0, k0 + s), [k0 + s, k0 + 2 s), ... up to k1.  One op
//                     for a promotion loop or a sequential split-K reduction, so the program
//                     stays a few words long however many blocks or slices (CPU only, as
//                     CHAIN).
//
// The final top is rounded to the output format (RNE); NaN becomes the arch's NaN encoding.
// Shared by the CPU (cpu/sched_cpu.cpp) and CUDA (cuda/sched_cuda.cu) kernels.
#pragma once
#include "chain.h"

namespace mma {

enum SchedOp : int64_t { MMA_SCHED_OPS(MMA_ENUM_MEMBER) };  // layout.h
constexpr int kSchedStack = 64;   // the compiler orders children so chains stay shallow
constexpr int kSchedMaxWidth = 256;

struct SchedConsts {
  int32_t ws64;  // workspace: 0 = fp32, 1 = fp64
  double alpha, beta;
};

MMA_HD double ws_round(const SchedConsts& S, double x) {
  return S.ws64 ? x : double(f32_rn(x));
}
MMA_HD double ws_add(const SchedConsts& S, double x, double y) {
  if (S.ws64) return add_rn(x, y);
  return double(add_rn(f32_rn(x), f32_rn(y)));
}
MMA_HD double ws_mul(const SchedConsts& S, double x, double y) {
  if (S.ws64) return mul_rn(x, y);
  return double(mul_rn(f32_rn(x), f32_rn(y)));
}
MMA_HD double ws_fma(const SchedConsts& S, double a, double b, double c) {
  if (S.ws64) return fma_rn(a, b, c);
  return double(fma_rn(f32_rn(a), f32_rn(b), f32_rn(c)));
}

// Output-format bits -> exact value.
MMA_HD double out_value(int32_t rho, const FormatDesc& fo, uint64_t bits) {
  if (rho == kRneFp64) return f64_of(bits);
  if (rho != kRneFp16) return double(f32_of(uint32_t(bits)));
  const Dec d = decode(fo, bits);
  if (d.cls == kNan) return f64_of(0x7FF8000000000000ull);
  if (d.cls == kInf) return f64_of(d.sig < 0 ? 0xFFF0000000000000ull : 0x7FF0000000000000ull);
  if (d.sig == 0) return f64_of(uint64_t((bits >> 15) & 1) << 63);
  return double(d.sig) * f64_of(uint64_t(d.exp - 10 + 1023) << 52);
}
MMA_HD double out_value(const Params& P, uint64_t bits) { return out_value(P.rho, P.fo, bits); }

// Exact value -> output-format bits, round to nearest even (NaN: the arch's encoding).
MMA_HD uint64_t out_bits_rne(const Params& P, double x) {
  if (is_nan(x)) return P.nan_bits;
  if (P.rho == kRneFp64) return bits_of(x);
  if (P.rho != kRneFp16) return bits_of(f32_rn(x));
  const uint64_t b = bits_of(x);
  const int neg = int(b >> 63);
  const int32_t be = int32_t((b >> 52) & 0x7FF);
  const uint64_t frac = b & ((uint64_t(1) << 52) - 1);
  const OutFmt o = out_fmt(kRneFp16);
  if (be == 0x7FF) return inf_bits(o, neg);
  if (be == 0) return neg ? sign_bit(o) : 0;  // fp64 subnormals are far below fp16's range
  return round_pack(neg, frac | (uint64_t(1) << 52), be - 1075, o, kRNE);
}

// Src gives the operand codes of this output element (IEEE bits for fma / ftz_addmul):
// src.ak(k) = A[i, k], src.bk(k) = B[k, j].
template <class Src>
MMA_HD double sched_node(const Params& P, const Src& src, const int64_t* pr, int n,
                         int width, bool has_acc, double acc) {
  if (P.op == kFma) {  // one product (the compiler checked n == 1)
    if (P.rho == kRneFp64) {
      const double x = f64_of(src.ak(pr[0])), y = f64_of(src.bk(pr[0]));
      return fma_rn(x, y, has_acc ? acc : 0.0);
    }
    const float x = f32_of(uint32_t(src.ak(pr[0]))), y = f32_of(uint32_t(src.bk(pr[0])));
    return double(fma_rn(x, y, has_acc ? f32_rn(acc) : 0.0f));
  }
  if (P.op == kFtzAddMul) {  // one instruction: width products (a multiple of P, up to L),
                             // its accumulator input flushed once, then its groups of P
    float xa[kSchedMaxWidth], xb[kSchedMaxWidth];
    for (int s = 0; s < width; ++s) xa[s] = xb[s] = 0.0f;
    for (int t = 0; t < n; ++t) {
      const int s = int(pr[2 * t + 1]);
      xa[s] = f32_of(uint32_t(src.ak(pr[2 * t])));
      xb[s] = f32_of(uint32_t(src.bk(pr[2 * t])));
    }
    float a = ftz_acc_in(has_acc ? f32_rn(acc) : 0.0f);
    for (int g = 0; g < width; g += P.P) a = ftz_group(P, xa, xb, g, width, a);
    return double(a);
  }
  int32_t sa[kSchedMaxWidth], ea[kSchedMaxWidth], sb[kSchedMaxWidth], eb[kSchedMaxWidth];
  uint8_t ca[kSchedMaxWidth], cb[kSchedMaxWidth];
  for (int s = 0; s < width; ++s) {
    sa[s] = sb[s] = 0;
    ea[s] = eb[s] = kZeroExp;
    ca[s] = cb[s] = kFinite;
  }
  for (int t = 0; t < n; ++t) {
    const int64_t k = pr[2 * t];
    const int s = int(pr[2 * t + 1]);
    const Dec x = decode(P.fa, src.ak(k)), y = decode(P.fb, src.bk(k));
    sa[s] = x.sig; ea[s] = x.exp; ca[s] = x.cls;
    sb[s] = y.sig; eb[s] = y.exp; cb[s] = y.cls;
  }
  const Chunk ch{Operand{sa, ea, ca}, Operand{sb, eb, cb}, width, 0, nullptr, nullptr};
  const uint64_t c_bits = has_acc ? out_bits_rne(P, acc) : 0;
  return out_value(P, fused_op(P, out_fmt(P.rho), ch, c_bits, true));
}

// Runs the program for output (bi, i, j).  partial(s) and cval() return exact values.
template <class Src, class Partial, class CVal>
MMA_HD uint64_t run_schedule(const Params& P, const SchedConsts& S, const int64_t* prog,
                             int64_t len, const Src& src, const Partial& partial,
                             const CVal& cval) {
  double st[kSchedStack];
  int sp = 0;
  for (int64_t pc = 0; pc < len;) {
    switch (prog[pc]) {
      case kSPartial: st[sp++] = partial(prog[pc + 1]); pc += 2; break;
      case kSC: st[sp++] = cval(); pc += 1; break;
      case kSZero: st[sp++] = 0.0; pc += 1; break;
      case kSAdd: {
        const double y = st[--sp];
        st[sp - 1] = ws_add(S, ws_round(S, st[sp - 1]), ws_round(S, y));
        pc += 1;
        break;
      }
      case kSNode: {
        const int n = int(prog[pc + 1]);
        const bool has_acc = prog[pc + 2] != 0;
        const int width = int(prog[pc + 3]);
        const double acc = has_acc ? st[--sp] : 0.0;
        st[sp++] = sched_node(P, src, prog + pc + 4, n, width, has_acc, acc);
        pc += 4 + 2 * n;
        break;
      }
      case kSEpiAlpha: st[sp - 1] = ws_mul(S, S.alpha, st[sp - 1]); pc += 1; break;
      case kSEpiFma:
        st[sp - 1] = ws_fma(S, S.alpha, st[sp - 1], ws_mul(S, S.beta, cval()));
        pc += 1;
        break;
      default:  // kSEpiMulAdd
        st[sp - 1] = ws_add(S, ws_mul(S, S.alpha, st[sp - 1]), ws_mul(S, S.beta, cval()));
        pc += 1;
        break;
    }
  }
  return out_bits_rne(P, st[0]);
}

}  // namespace mma
