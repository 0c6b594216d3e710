// Vectorised chains on IEEE values (x86 AVX2): the FMA chain (Algorithm 4, fp32 and fp64) and
// AMD CDNA2's FTZ-AddMul (Algorithm 2).  Exact by construction: each output lane performs the
// same sequence of IEEE operations (same order, round to nearest, no FTZ/DAZ) as the scalar
// core in csrc/core/chain.h; only independent output columns share a register.
//
// Layout: B packed into panels [N/W][K][W] (W = two registers of columns), a register block
// of R rows x W columns, K blocks whose exact accumulators are stored between blocks.
#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

#include "fast_paths.h"
#include "fpenv.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(MMA_EMU_NO_SIMD)
#include <immintrin.h>
#define MMA_FAST_X86 1
#define MMA_AVX2 __attribute__((target("avx2,fma")))
#endif

namespace mma {
namespace {

#ifdef MMA_FAST_X86
// Thin vector layer so one micro-kernel serves fp32 (8 lanes) and fp64 (4 lanes).
template <class T> struct V;
template <> struct V<float> {
  using R = __m256;
  static constexpr int n = 8;
  MMA_AVX2 static R load(const float* p) { return _mm256_loadu_ps(p); }
  MMA_AVX2 static void store(float* p, R x) { _mm256_storeu_ps(p, x); }
  MMA_AVX2 static R bcast(const float* p) { return _mm256_broadcast_ss(p); }
  MMA_AVX2 static R fma(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
};
template <> struct V<double> {
  using R = __m256d;
  static constexpr int n = 4;
  MMA_AVX2 static R load(const double* p) { return _mm256_loadu_pd(p); }
  MMA_AVX2 static void store(double* p, R x) { _mm256_storeu_pd(p, x); }
  MMA_AVX2 static R bcast(const double* p) { return _mm256_broadcast_sd(p); }
  MMA_AVX2 static R fma(R a, R b, R c) { return _mm256_fmadd_pd(a, b, c); }
};

// acc[r][0..W) = fma chain over k in [k0, k1) of rows a + r*lda with the panel bp ([K][W]).
template <class T, int R>
MMA_AVX2 __attribute__((always_inline)) inline void fma_block(const T* a, int64_t lda,
                                                              const T* bp, int64_t k0, int64_t k1,
                                                              T* acc, int64_t ldacc) {
  using Vt = V<T>;
  constexpr int W = 2 * Vt::n;
  typename Vt::R c0[R], c1[R];
  for (int r = 0; r < R; ++r) { c0[r] = Vt::load(acc + r * ldacc); c1[r] = Vt::load(acc + r * ldacc + Vt::n); }
  for (int64_t k = k0; k < k1; ++k) {
    const typename Vt::R b0 = Vt::load(bp + k * W), b1 = Vt::load(bp + k * W + Vt::n);
    for (int r = 0; r < R; ++r) {
      const typename Vt::R x = Vt::bcast(a + r * lda + k);
      c0[r] = Vt::fma(x, b0, c0[r]);
      c1[r] = Vt::fma(x, b1, c1[r]);
    }
  }
  for (int r = 0; r < R; ++r) { Vt::store(acc + r * ldacc, c0[r]); Vt::store(acc + r * ldacc + Vt::n, c1[r]); }
}

template <class T>
MMA_AVX2 void fma_rows_avx2(const T* a, int64_t lda, int64_t rows, const T* bp, int64_t k0,
                            int64_t k1, T* acc, int64_t ldacc) {
  int64_t r = 0;
  for (; r + 6 <= rows; r += 6) fma_block<T, 6>(a + r * lda, lda, bp, k0, k1, acc + r * ldacc, ldacc);
  for (; r < rows; ++r) fma_block<T, 1>(a + r * lda, lda, bp, k0, k1, acc + r * ldacc, ldacc);
}

// FTZ-AddMul, 16 columns of one row: the exact statement order of dot_ftz.
MMA_AVX2 inline __m256 ftz_keep_sign8(__m256 z) {
  const __m256 em = _mm256_castsi256_ps(_mm256_set1_epi32(0x7F800000));
  const __m256 sm = _mm256_castsi256_ps(_mm256_set1_epi32(int32_t(0x80000000u)));
  const __m256 den = _mm256_castsi256_ps(
      _mm256_cmpeq_epi32(_mm256_castps_si256(_mm256_and_ps(z, em)), _mm256_setzero_si256()));
  return _mm256_blendv_ps(z, _mm256_and_ps(z, sm), den);
}

MMA_AVX2 void ftz_rows_avx2(int PP, const float* a, int64_t lda, int64_t rows, const float* bp,
                            int64_t k0, int64_t k1, float* acc, int64_t ldacc) {
  const __m256 tiny = _mm256_castsi256_ps(_mm256_set1_epi32(0x00800000));
  const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  for (int64_t r = 0; r < rows; ++r) {
    const float* ar = a + r * lda;
    for (int h = 0; h < 2; ++h) {
      __m256 c = _mm256_loadu_ps(acc + r * ldacc + 8 * h);
      for (int64_t k = k0; k < k1; k += PP) {
        // accumulator input: |acc| < 2^-126 (subnormal, +-0) -> +0; NaN compares false
        c = _mm256_andnot_ps(_mm256_cmp_ps(_mm256_and_ps(c, abs), tiny, _CMP_LT_OQ), c);
        __m256 p[4];
        for (int l = 0; l < PP; ++l)
          p[l] = ftz_keep_sign8(_mm256_mul_ps(_mm256_broadcast_ss(ar + k + l),
                                              _mm256_loadu_ps(bp + (k + l) * 16 + 8 * h)));
        __m256 s = ftz_keep_sign8(_mm256_add_ps(p[0], p[1]));
        if (PP == 4) s = ftz_keep_sign8(_mm256_add_ps(s, ftz_keep_sign8(_mm256_add_ps(p[2], p[3]))));
        c = ftz_keep_sign8(_mm256_add_ps(c, s));
      }
      _mm256_storeu_ps(acc + r * ldacc + 8 * h, c);
    }
  }
}

// A and B of one batch element packed for the micro-kernels: A (M, Kp) rows, B panels
// [NP][Kp][W]; FTZ-AddMul flushes input subnormals (of the input format) while packing.
template <class T>
struct Packed {
  FastKind kind = FastKind::kNone;
  int PP = 1;
  int64_t M = 0, K = 0, Kp = 0, NP = 0, Np = 0;
  std::vector<T> Ap, Bp;
};

template <class T>
void pack(const Params& P, FastKind kind, const at::Tensor& ab, const at::Tensor& bb, Packed<T>& pk) {
  constexpr int W = 2 * V<T>::n;  // panel width: 16 fp32 or 8 fp64 columns
  const int64_t M = ab.size(0), K = ab.size(1), N = bb.size(1);
  pk.kind = kind;
  pk.PP = kind == FastKind::kFtz ? P.P : 1;
  pk.M = M; pk.K = K;
  pk.Kp = (K + pk.PP - 1) / pk.PP * pk.PP;  // FTZ chunks are zero padded
  pk.NP = (N + W - 1) / W;
  pk.Np = pk.NP * W;
  const int64_t Kp = pk.Kp, Np = pk.Np;
  const T tha = T(f32_of(uint32_t(P.fa.emin() + 127) << 23)), thb = T(f32_of(uint32_t(P.fb.emin() + 127) << 23));
  auto flush = [&](T x, T th) { return (kind == FastKind::kFtz && x < th && x > -th) ? T(0) : x; };
  pk.Ap.resize(size_t(M * Kp));
  pk.Bp.resize(size_t(pk.NP * Kp * W));
  const T* ap = ab.data_ptr<T>();
  const T* bptr = bb.data_ptr<T>();
  const int64_t as0 = ab.stride(0), as1 = ab.stride(1), bs0 = bb.stride(0), bs1 = bb.stride(1);
  at::parallel_for(0, M, 64, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      T* dst = pk.Ap.data() + i * Kp;
      for (int64_t k = 0; k < Kp; ++k) dst[k] = k < K ? flush(ap[i * as0 + k * as1], tha) : T(0);
    }
  });
  at::parallel_for(0, Kp, 64, [&](int64_t lo, int64_t hi) {
    for (int64_t k = lo; k < hi; ++k)
      for (int64_t j = 0; j < Np; ++j)
        pk.Bp[size_t(((j / W) * Kp + k) * W + j % W)] =
            (k < K && j < N) ? flush(bptr[k * bs0 + j * bs1], thb) : T(0);
  });
}

// acc rows [i0, i0 + rows) (stride ld) advanced over the products [k0, k1).
template <class T>
void run_packed(const Packed<T>& pk, int64_t i0, int64_t rows, int64_t k0, int64_t k1, T* acc,
                int64_t ld) {
  constexpr int W = 2 * V<T>::n;
  const int64_t kend = std::min(pk.Kp, (k1 + pk.PP - 1) / pk.PP * pk.PP);
  const int64_t KB = std::max<int64_t>(pk.PP, (pk.kind == FastKind::kFtz ? 256 : 512) / pk.PP * pk.PP);
  const T* arow = pk.Ap.data() + i0 * pk.Kp;
  for (int64_t kb = k0; kb < kend; kb += KB) {
    const int64_t ke = std::min(kend, kb + KB);
    for (int64_t p = 0; p < pk.NP; ++p) {
      const T* bp = pk.Bp.data() + p * pk.Kp * W;
      if constexpr (sizeof(T) == 4) {
        if (pk.kind == FastKind::kFtz) {
          ftz_rows_avx2(pk.PP, arow, pk.Kp, rows, bp, kb, ke, acc + p * W, ld);
          continue;
        }
      }
      fma_rows_avx2<T>(arow, pk.Kp, rows, bp, kb, ke, acc + p * W, ld);
    }
  }
}

template <class T>
bool run_values(const Params& P, FastKind kind, const at::Tensor& a, const at::Tensor& b,
                const at::Tensor& c, at::Tensor& out) {
  const int64_t Bt = a.size(0), M = a.size(1), N = b.size(2);
  thread_local Packed<T> pk;
  const T* cp = c.data_ptr<T>();
  const int64_t cs0 = c.stride(0), cs1 = c.stride(1), cs2 = c.stride(2);
  T* op = out.data_ptr<T>();
  constexpr int64_t RB = 24;
  for (int64_t bi = 0; bi < Bt && !interrupted(); ++bi) {
    pack(P, kind, a[bi], b[bi], pk);
    const int64_t Np = pk.Np;
    const int64_t nrb = (M + RB - 1) / RB;
    at::parallel_for(0, nrb, 1, [&](int64_t lo, int64_t hi) {
      FpEnvGuard env;  // IEEE round to nearest, no FTZ/DAZ
      thread_local std::vector<T> accv;
      accv.resize(size_t(RB * Np));
      T* acc = accv.data();
      for (int64_t rb = lo; rb < hi && !interrupted(); ++rb) {
        const int64_t i0 = rb * RB, rows = std::min(M, i0 + RB) - i0;
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < Np; ++j)
            acc[r * Np + j] = (P.epilogue || j >= N) ? T(0) : cp[bi * cs0 + (i0 + r) * cs1 + j * cs2];
        run_packed(pk, i0, rows, 0, pk.Kp, acc, Np);
        for (int64_t r = 0; r < rows; ++r) {
          T* orow = op + (bi * M + i0 + r) * N;
          for (int64_t j = 0; j < N; ++j) {
            T v = acc[r * Np + j];
            if (P.epilogue) v = add_rn(v, cp[bi * cs0 + (i0 + r) * cs1 + j * cs2]);
            if (is_nan(v)) {
              if constexpr (sizeof(T) == 4) v = f32_of(uint32_t(P.nan_bits));
              else v = f64_of(P.nan_bits);
            }
            orow[j] = v;
          }
        }
        check_interrupt_main();
      }
    });
  }
  return true;
}
#endif

}  // namespace

bool fast_values(const Params& P, const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                 at::Tensor& out) {
#ifndef MMA_FAST_X86
  (void)P; (void)a; (void)b; (void)c; (void)out;
  return false;
#else
  const FastKind kind = fast_eligible(P);
  if ((kind != FastKind::kFma && kind != FastKind::kFtz) || cpu_isa() == Isa::kScalar) return false;
  if (c.scalar_type() == at::kDouble) {
    if (kind != FastKind::kFma || a.scalar_type() != at::kDouble) return false;
    return run_values<double>(P, kind, a, b, c, out);
  }
  if (a.scalar_type() != at::kFloat || b.scalar_type() != at::kFloat) return false;
  return run_values<float>(P, kind, a, b, c, out);
#endif
}

// ---- ValuePanels ---------------------------------------------------------------------------
bool ValuePanels::prepare(const Params& P, const at::Tensor& a, const at::Tensor& b) {
#ifdef MMA_FAST_X86
  const FastKind kind = fast_eligible(P);
  if ((kind != FastKind::kFma && kind != FastKind::kFtz) || cpu_isa() == Isa::kScalar)
    return false;
  f64_ = a.scalar_type() == at::kDouble;
  if (f64_) {  // the fp64 FMA chain
    if (kind != FastKind::kFma || P.rho != kRneFp64 || b.scalar_type() != at::kDouble)
      return false;
    thread_local Packed<double> pk;
    pack(P, kind, a, b, pk);
    pk_ = &pk;
    return true;
  }
  if (a.scalar_type() != at::kFloat || b.scalar_type() != at::kFloat || P.rho != kRneFp32)
    return false;
  thread_local Packed<float> pk;
  pack(P, kind, a, b, pk);
  pk_ = &pk;
  return true;
#else
  (void)P; (void)a; (void)b;
  return false;
#endif
}

int64_t ValuePanels::width() const {
#ifdef MMA_FAST_X86
  return f64_ ? static_cast<const Packed<double>*>(pk_)->Np
              : static_cast<const Packed<float>*>(pk_)->Np;
#else
  return 0;
#endif
}

void ValuePanels::run(int64_t i0, int64_t i1, int64_t k0, int64_t k1, float* acc,
                      int64_t ld) const {
#ifdef MMA_FAST_X86
  TORCH_CHECK(!f64_, "ValuePanels: fp64 values need an fp64 accumulator");
  if (k1 > k0) run_packed(*static_cast<const Packed<float>*>(pk_), i0, i1 - i0, k0, k1, acc, ld);
#else
  (void)i0; (void)i1; (void)k0; (void)k1; (void)acc; (void)ld;
#endif
}

void ValuePanels::run(int64_t i0, int64_t i1, int64_t k0, int64_t k1, double* acc,
                      int64_t ld) const {
#ifdef MMA_FAST_X86
  TORCH_CHECK(f64_, "ValuePanels: fp32 values need an fp32 accumulator");
  if (k1 > k0) run_packed(*static_cast<const Packed<double>*>(pk_), i0, i1 - i0, k0, k1, acc, ld);
#else
  (void)i0; (void)i1; (void)k0; (void)k1; (void)acc; (void)ld;
#endif
}

}  // namespace mma
