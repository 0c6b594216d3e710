// The vector layer for x86 AVX2 + FMA + F16C: 8 fp32 / int32 lanes, 4 fp64 lanes, masks as
// all-ones lanes.  The same operations as avx512.h and neon.h (docs/cpu_fast.md, "One source
// for every ISA"); the kernels in kern/ are written once against them.
//
// Every function carries the target attribute, so this header can be included by a
// translation unit compiled for baseline x86-64.  Rounding never depends on MXCSR: the
// kernels run under round to nearest and the round-toward-zero conversions are exact
// fix-ups of the nearest ones.
#pragma once
#include <immintrin.h>

#include <cstdint>

#define MMA_VT __attribute__((target("avx2,fma,f16c"), always_inline)) static inline
#define MMA_KT __attribute__((target("avx2,fma,f16c")))

namespace mma {
namespace simd {

struct Avx2 {
  static constexpr const char* kName = "avx2";
  static constexpr int kN = 8;   // fp32 / int32 lanes
  static constexpr int kND = 4;  // fp64 lanes
  using F = __m256;
  using I = __m256i;
  using D = __m256d;
  using M = __m256i;   // kN-lane mask: all ones where true
  using MD = __m256d;  // kND-lane mask
  using B = __m256i;   // 32 int8 lanes (one panel's exponents)

  // ---- int32 ----
  MMA_VT I set1(int32_t x) { return _mm256_set1_epi32(x); }
  MMA_VT I zero() { return _mm256_setzero_si256(); }
  MMA_VT I loadu(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
  MMA_VT void storeu(void* p, I x) { _mm256_storeu_si256(static_cast<__m256i*>(p), x); }
  MMA_VT I add(I a, I b) { return _mm256_add_epi32(a, b); }
  MMA_VT I sub(I a, I b) { return _mm256_sub_epi32(a, b); }
  MMA_VT I and_(I a, I b) { return _mm256_and_si256(a, b); }
  MMA_VT I or_(I a, I b) { return _mm256_or_si256(a, b); }
  MMA_VT I xor_(I a, I b) { return _mm256_xor_si256(a, b); }
  MMA_VT I max(I a, I b) { return _mm256_max_epi32(a, b); }
  MMA_VT I min(I a, I b) { return _mm256_min_epi32(a, b); }
  template <int n> MMA_VT I srli(I a) { return _mm256_srli_epi32(a, n); }
  template <int n> MMA_VT I slli(I a) { return _mm256_slli_epi32(a, n); }
  MMA_VT M eq(I a, I b) { return _mm256_cmpeq_epi32(a, b); }
  MMA_VT M gt(I a, I b) { return _mm256_cmpgt_epi32(a, b); }
  MMA_VT M ne(I a, I b) { return m_not(eq(a, b)); }
  MMA_VT M outside(I x, int32_t lo, int32_t hi) {  // x < lo or x > hi
    return _mm256_or_si256(_mm256_cmpgt_epi32(set1(lo), x), _mm256_cmpgt_epi32(x, set1(hi)));
  }
  // the same with the bounds as vectors: lo, hi and hi - lo (each layer takes what it compares)
  MMA_VT M outside_v(I x, I lo, I hi, I) { return _mm256_or_si256(_mm256_cmpgt_epi32(lo, x), _mm256_cmpgt_epi32(x, hi)); }
  MMA_VT M test(I a, I b) { return ne(_mm256_and_si256(a, b), zero()); }  // (a & b) != 0
  MMA_VT I add_maskz(M m, I a, I b) { return _mm256_and_si256(m, _mm256_add_epi32(a, b)); }  // m ? a + b : 0
  MMA_VT M sign(I a) { return _mm256_srai_epi32(a, 31); }
  MMA_VT I select(M m, I t, I f) { return _mm256_blendv_epi8(f, t, m); }
  MMA_VT I max_where(M m, I a, I b) { return _mm256_blendv_epi8(b, _mm256_max_epi32(a, b), m); }  // m ? max(a, b) : b
  MMA_VT I maskz(M m, I a) { return _mm256_and_si256(m, a); }
  MMA_VT I or_where(M m, I a, I b) { return _mm256_or_si256(a, _mm256_and_si256(m, b)); }  // m ? a | b : a
  // signed overflow of r = s + t: in the sign of (r ^ s) & (r ^ t)
  MMA_VT M add_overflow(I r, I s, I t) { return sign(_mm256_and_si256(_mm256_xor_si256(r, s), _mm256_xor_si256(r, t))); }

  // ---- masks ----
  MMA_VT M m_and(M a, M b) { return _mm256_and_si256(a, b); }
  MMA_VT M m_or(M a, M b) { return _mm256_or_si256(a, b); }
  MMA_VT M m_andnot(M a, M b) { return _mm256_andnot_si256(a, b); }  // ~a & b
  MMA_VT M m_not(M a) { return _mm256_xor_si256(a, _mm256_set1_epi32(-1)); }
  MMA_VT M m_none() { return _mm256_setzero_si256(); }
  MMA_VT M m_from_bits(uint32_t b) {  // lane l: bit l
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(int32_t(b)), bit), bit);
  }
  MMA_VT uint32_t bits(M m) { return uint32_t(_mm256_movemask_ps(_mm256_castsi256_ps(m))); }

  // ---- fp32 ----
  MMA_VT F bcast(const float* p) { return _mm256_broadcast_ss(p); }
  MMA_VT F set1f(float x) { return _mm256_set1_ps(x); }
  MMA_VT F load(const float* p) { return _mm256_loadu_ps(p); }
  MMA_VT F loadu_f(const float* p) { return _mm256_loadu_ps(p); }
  MMA_VT void storeu_f(float* p, F x) { _mm256_storeu_ps(p, x); }
  MMA_VT F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  MMA_VT F addf(F a, F b) { return _mm256_add_ps(a, b); }
  MMA_VT F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  MMA_VT F floorf(F a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
  MMA_VT F truncf(F a) { return _mm256_round_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
  MMA_VT F asf(I a) { return _mm256_castsi256_ps(a); }
  MMA_VT I asi(F a) { return _mm256_castps_si256(a); }
  MMA_VT I cvtt(F a) { return _mm256_cvttps_epi32(a); }  // toward zero
  // int32 -> fp32 rounded toward zero.  Inside an RzScope (MXCSR round toward zero) one
  // conversion; elsewhere the nearest conversion, one step back where it rounded away from
  // zero (i - back has the other sign then; exact mod 2^32, also at 2^31).
  template <bool kInRzScope> MMA_VT F cvt_rz(I i) {
    const __m256 f = _mm256_cvtepi32_ps(i);
    if (kInRzScope) return f;
    const __m256i d = _mm256_sub_epi32(i, _mm256_cvttps_epi32(f));
    const __m256i away = _mm256_andnot_si256(_mm256_cmpeq_epi32(d, zero()), sign(_mm256_xor_si256(d, i)));
    return asf(_mm256_add_epi32(asi(f), away));  // bits - 1: one step toward zero
  }
  // MXCSR round toward zero for the kernels' scope (no other rounding happens inside it:
  // products and scalings are exact, conversions to fp16 name their rounding)
  struct RzScope {
    unsigned saved;
    RzScope() : saved(_mm_getcsr()) { _mm_setcsr(saved | 0x6000u); }
    ~RzScope() { _mm_setcsr(saved); }
  };
  // an fp32 value rounded to fp16 (nearest even, overflow to infinity) and back
  MMA_VT F f16_round(F a) { return _mm256_cvtph_ps(_mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT)); }
  MMA_VT M f_eq(F a, F b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_EQ_OQ)); }
  MMA_VT M f_lt(F a, F b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_LT_OQ)); }
  MMA_VT F f_select(M m, F t, F f) { return _mm256_blendv_ps(f, t, _mm256_castsi256_ps(m)); }
  MMA_VT F f_and(F a, F b) { return _mm256_and_ps(a, b); }
  MMA_VT F f_andnot(M m, F a) { return _mm256_andnot_ps(_mm256_castsi256_ps(m), a); }

  // ---- 32 int8 lanes ----
  MMA_VT B b_set1(int8_t x) { return _mm256_set1_epi8(x); }
  MMA_VT B b_load(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  MMA_VT B b_adds(B a, B b) { return _mm256_adds_epi8(a, b); }
  MMA_VT B b_max(B a, B b) { return _mm256_max_epi8(a, b); }
  MMA_VT B b_min(B a, B b) { return _mm256_min_epi8(a, b); }
  // max over k < n (n >= 1) of adds(a[k], b[k * 32 + lane])
  MMA_VT B b_emax(const int8_t* a, const int8_t* b, int n) {
    B m = b_adds(b_set1(a[0]), b_load(b));
#pragma GCC unroll 4
    for (int k = 1; k < n; ++k) m = b_max(m, b_adds(b_set1(a[k]), b_load(b + k * 32)));
    return m;
  }
  MMA_VT void b_widen(B b, I* out) {  // 32 int8 -> 4 x 8 int32
    const __m128i lo = _mm256_castsi256_si128(b), hi = _mm256_extracti128_si256(b, 1);
    out[0] = _mm256_cvtepi8_epi32(lo);
    out[1] = _mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8));
    out[2] = _mm256_cvtepi8_epi32(hi);
    out[3] = _mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8));
  }

  // ---- fp64 (half of a kN vector: h = 0 low lanes, 1 high lanes) ----
  MMA_VT D set1d(double x) { return _mm256_set1_pd(x); }
  MMA_VT D zerod() { return _mm256_setzero_pd(); }
  MMA_VT D loadud(const double* p) { return _mm256_loadu_pd(p); }
  MMA_VT void storeud(double* p, D x) { _mm256_storeu_pd(p, x); }
  MMA_VT D bcastd(const double* p) { return _mm256_broadcast_sd(p); }
  MMA_VT D muld(D a, D b) { return _mm256_mul_pd(a, b); }
  MMA_VT D addd(D a, D b) { return _mm256_add_pd(a, b); }
  MMA_VT D subd(D a, D b) { return _mm256_sub_pd(a, b); }
  MMA_VT D fmaddd(D a, D b, D c) { return _mm256_fmadd_pd(a, b, c); }
  MMA_VT D floord(D a) { return _mm256_round_pd(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
  MMA_VT D truncd(D a) { return _mm256_round_pd(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
  MMA_VT MD d_ne(D a, D b) { return _mm256_cmp_pd(a, b, _CMP_NEQ_UQ); }
  MMA_VT MD md_or(MD a, MD b) { return _mm256_or_pd(a, b); }
  MMA_VT MD md_none() { return _mm256_setzero_pd(); }
  MMA_VT uint32_t bitsd(MD m) { return uint32_t(_mm256_movemask_pd(m)); }
  MMA_VT D d_maskz(MD m, D a) { return _mm256_and_pd(m, a); }
  MMA_VT MD half_m(M m, int h) {  // the fp64 lanes of half h of a kN mask
    return _mm256_castsi256_pd(_mm256_cvtepi32_epi64(h ? _mm256_extracti128_si256(m, 1) : _mm256_castsi256_si128(m)));
  }
  MMA_VT D half_f(F a, int h) { return _mm256_cvtps_pd(h ? _mm256_extractf128_ps(a, 1) : _mm256_castps256_ps128(a)); }
  MMA_VT D half_i(I a, int h) { return _mm256_cvtepi32_pd(h ? _mm256_extracti128_si256(a, 1) : _mm256_castsi256_si128(a)); }
  // 2^e for the fp64 lanes of half h (e normal: -1022 <= e <= 1023)
  MMA_VT D pow2(I e, int h) {
    const __m256i e64 = _mm256_cvtepi32_epi64(h ? _mm256_extracti128_si256(e, 1) : _mm256_castsi256_si128(e));
    return _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_add_epi64(e64, _mm256_set1_epi64x(1023)), 52));
  }
  // the integer x (|x| < 2^53) rounded to its leading 53 - j bits, toward minus infinity (down)
  // or zero: on the bit pattern, clear the j low bits, after adding 2^j - 1 to a negative x's
  // (a carry moves into the exponent field: the next binade)
  MMA_VT D keep_bits(D x, int j, bool down) {
    const __m256i b = _mm256_castpd_si256(x), low = _mm256_set1_epi64x((int64_t(1) << j) - 1);
    const __m256i up = down ? _mm256_and_si256(_mm256_cmpgt_epi64(_mm256_setzero_si256(), b), low) : _mm256_setzero_si256();
    return _mm256_castsi256_pd(_mm256_andnot_si256(low, _mm256_add_epi64(b, up)));
  }
  // two fp64 halves -> one fp32 vector, nearest even
  MMA_VT F join_rne(D lo, D hi) {
    return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(lo)), _mm256_cvtpd_ps(hi), 1);
  }
  // ... toward zero: the nearest conversion, one step back where it rounded away from zero
  // (|x| < 2^127 and not in the fp32 subnormal range: the callers' integers)
  MMA_VT F join_rz(D lo, D hi) {
    const __m128 a = _mm256_cvtpd_ps(lo), b = _mm256_cvtpd_ps(hi);
    const __m256d ab = _mm256_set1_pd(-0.0);
    const __m256d up_a = _mm256_cmp_pd(_mm256_andnot_pd(ab, _mm256_cvtps_pd(a)), _mm256_andnot_pd(ab, lo), _CMP_GT_OQ);
    const __m256d up_b = _mm256_cmp_pd(_mm256_andnot_pd(ab, _mm256_cvtps_pd(b)), _mm256_andnot_pd(ab, hi), _CMP_GT_OQ);
    const __m256i up = _mm256_set_m128i(narrow(up_b), narrow(up_a));
    const __m256 f = _mm256_insertf128_ps(_mm256_castps128_ps256(a), b, 1);
    return asf(_mm256_add_epi32(asi(f), up));  // up is -1 where the magnitude went up
  }
  MMA_VT __m128i narrow(__m256d m) {  // 4 fp64 lane masks -> 4 int32 lane masks
    const __m256i s = _mm256_permutevar8x32_epi32(_mm256_castpd_si256(m), _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
    return _mm256_castsi256_si128(s);
  }

  // keeps the compiler from reassociating independent accumulator chains into spills
  MMA_VT void pin(I& a) { asm volatile("" : "+x"(a)); }
  MMA_VT void pin(F& a) { asm volatile("" : "+x"(a)); }
  MMA_VT void pin(D& a) { asm volatile("" : "+x"(a)); }
  // ---- FTZ-AddMul (kern/values.inc) ----
  // a value whose exponent field is zero (subnormal, +-0) becomes the zero of its sign:
  // z & (keep | sign), keep = all ones where the exponent field is nonzero (single-uop
  // logic ops, no vblendvps)
  MMA_VT F f_ftz(F z) {
    const __m256 e = _mm256_and_ps(z, _mm256_castsi256_ps(_mm256_set1_epi32(0x7F800000)));
    const __m256i keep = _mm256_cmpgt_epi32(_mm256_castps_si256(e), _mm256_setzero_si256());
    const __m256 m = _mm256_or_ps(_mm256_castsi256_ps(keep), _mm256_castsi256_ps(_mm256_set1_epi32(int32_t(0x80000000u))));
    return _mm256_and_ps(z, m);
  }
};

}  // namespace simd
}  // namespace mma
