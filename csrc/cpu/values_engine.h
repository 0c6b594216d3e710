// The FMA-chain / FTZ-AddMul kernels (kern/values.inc, one source per ISA) and their packed
// operands, without torch (the aarch64 harness of tests/native builds it too).  B is packed
// into panels [NP][Kp][W] (W = two registers of columns), A into rows (M, Kp); FTZ-AddMul
// flushes input subnormals (of the input format) while packing.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "fdpa_engine.h"

namespace mma {

struct ValueKernels {
  int wf = 0, wd = 0;  // panel widths (columns) for fp32 and fp64
  void (*f32)(const float*, int64_t, int64_t, const float*, int64_t, int64_t, float*, int64_t) = nullptr;
  void (*f64)(const double*, int64_t, int64_t, const double*, int64_t, int64_t, double*, int64_t) = nullptr;
  // FTZ-AddMul: (P, L, inner flushes, ...)
  void (*ftz)(int, int, bool, const float*, int64_t, int64_t, const float*, int64_t, int64_t, float*, int64_t) = nullptr;
};
ValueKernels value_kernels_avx2();
ValueKernels value_kernels_avx512();
ValueKernels value_kernels_avx512_wide();  // the 512-bit kernels, whatever the CPU
ValueKernels value_kernels_neon();
ValueKernels value_kernels(Isa isa);

// FTZ-AddMul's flushes of products and partial sums can change a value only where some of
// them meets a subnormal.  Inputs are flushed to 0 or |x| >= 2^emin (of their format), so a
// nonzero product is at least 2^(ea + eb) and, as an fp32 number, a multiple of
// g = 2^(ea + eb - 23); sums of multiples of g round to multiples of g, so a nonzero partial
// sum is at least g; and the accumulator (normal or 0 after its input flush, then only such
// results) plus a nonzero multiple s of g is either at least 2^(e_s - 1) (|c| below half of
// |s|) or a nonzero multiple of g 2^-24.  With ea + eb - 23 - 24 >= -126 none of them is
// subnormal: the kernel may leave those flushes out (fp16 inputs: ea + eb = -28; bf16: -252).
inline bool ftz_inner_needed(const Params& P) { return P.fa.emin() + P.fb.emin() - 47 < -126; }

template <class T>
struct ValuesEngine {
  ValueKernels ks;
  FastKind kind = FastKind::kNone;
  int PP = 1, W = 0;
  int LL = 1;  // FTZ-AddMul: products per instruction (its accumulator input flushed once)
  bool inner = true;  // FTZ-AddMul: flush products and partial sums (ftz_inner_needed)
  int64_t M = 0, K = 0, Kp = 0, NP = 0, Np = 0;
  std::vector<T> Ap, Bp;

  // false when isa has no kernel for P (FMA chain fp32 / fp64, FTZ-AddMul fp32)
  bool setup(const Params& P, Isa isa) {
    kind = fast_eligible(P);
    ks = value_kernels(isa);
    const bool f64 = sizeof(T) == 8;
    if (kind == FastKind::kFma) {
      if (f64 ? (P.rho != kRneFp64 || !ks.f64) : (P.rho != kRneFp32 || !ks.f32)) return false;
    } else if (kind == FastKind::kFtz) {
      if (f64 || !ks.ftz) return false;
    } else {
      return false;
    }
    PP = kind == FastKind::kFtz ? P.P : 1;
    LL = kind == FastKind::kFtz ? P.L : 1;
    inner = kind == FastKind::kFtz && ftz_inner_needed(P);
    W = f64 ? ks.wd : ks.wf;
    return W > 0;
  }

  // a(i, k) = a[i * as0 + k * as1] for k in [k0, k0 + Kb), b(k, j) = b[k * bs0 + j * bs1]
  void pack(const Params& P, const T* a, int64_t as0, int64_t as1, const T* b, int64_t bs0,
            int64_t bs1, int64_t M_, int64_t N, int64_t k0, int64_t Kb, const ParFor& par) {
    M = M_;
    K = Kb;
    Kp = (K + LL - 1) / LL * LL;  // FTZ instructions are zero padded (their groups all run)
    NP = (N + W - 1) / W;
    Np = NP * W;
    const T tha = T(f32_of(uint32_t(P.fa.emin() + 127) << 23));
    const T thb = T(f32_of(uint32_t(P.fb.emin() + 127) << 23));
    const bool ftz = kind == FastKind::kFtz;
    Ap.resize(size_t(M * Kp));
    Bp.resize(size_t(NP * Kp * W));
    // locals, not members, in the loops (the compiler cannot hoist members past the stores)
    T* const Ad = Ap.data();
    T* const Bd = Bp.data();
    const int64_t Kl = K, Kpl = Kp, NPl = NP, Wl = W;
    par(M, 64, [=](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        T* dst = Ad + i * Kpl;
        const T* src = a + i * as0 + k0 * as1;
        if (ftz)
          for (int64_t k = 0; k < Kl; ++k) {
            const T x = src[k * as1];
            dst[k] = (x < tha && x > -tha) ? T(0) : x;
          }
        else
          for (int64_t k = 0; k < Kl; ++k) dst[k] = src[k * as1];
        for (int64_t k = Kl; k < Kpl; ++k) dst[k] = T(0);
      }
    });
    par(Kpl, 64, [=](int64_t lo, int64_t hi) {
      for (int64_t k = lo; k < hi; ++k)
        for (int64_t p = 0; p < NPl; ++p) {
          T* dst = Bd + (p * Kpl + k) * Wl;
          const T* src = b + (k0 + k) * bs0;
          for (int64_t l = 0, j = p * Wl; l < Wl; ++l, ++j) {
            const T x = (k < Kl && j < N) ? src[j * bs1] : T(0);
            dst[l] = (ftz && x < thb && x > -thb) ? T(0) : x;
          }
        }
    });
  }

  // acc rows [i0, i0 + rows) (stride ld) advanced over the packed products [k0, k1)
  // (FTZ-AddMul: instructions of LL counted from k0, the last one zero padded).
  // (panels [p0, p1) only: columns [p0 * W, p1 * W); p1 < 0: all)
  void run(int64_t i0, int64_t rows, int64_t k0, int64_t k1, T* acc, int64_t ld,
           int64_t p0 = 0, int64_t p1 = -1) const {
    if (p1 < 0) p1 = NP;
    const int64_t kend = std::min(Kp, k0 + (k1 - k0 + LL - 1) / LL * LL);
    // K steps of 512 (fp32 FMA) / 256 (FTZ-AddMul, fp64 FMA: 7% faster than 512 with 512-bit
    // registers on this project's Intel Xeon, the same on AVX2; scripts/kern_bench)
    const int64_t KB = std::max<int64_t>(LL, (kind == FastKind::kFtz || sizeof(T) == 8 ? 256 : 512) / LL * LL);
    const T* arow = Ap.data() + i0 * Kp;
    for (int64_t kb = k0; kb < kend; kb += KB) {
      const int64_t ke = std::min(kend, kb + KB);
      for (int64_t p = p0; p < p1; ++p) {
        const T* bp = Bp.data() + p * Kp * W;
        if constexpr (sizeof(T) == 4) {
          if (kind == FastKind::kFtz) ks.ftz(PP, LL, inner, arow, Kp, rows, bp, kb, ke, acc + p * W, ld);
          else ks.f32(arow, Kp, rows, bp, kb, ke, acc + p * W, ld);
        } else {
          ks.f64(arow, Kp, rows, bp, kb, ke, acc + p * W, ld);
        }
      }
    }
  }
};

}  // namespace mma
