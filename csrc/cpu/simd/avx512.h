// The vector layer for x86 AVX-512 (F, BW, VL, DQ): 16 fp32 / int32 lanes, 8 fp64 lanes,
// mask registers, embedded rounding.  The same operations as avx2.h and neon.h.
#pragma once
#include <immintrin.h>

#include <cstdint>

#define MMA_VT512 \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq"), always_inline)) static inline
#define MMA_KT512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))

namespace mma {
namespace simd {

// b_emax's shuffle controls: pair j spreads byte 2j over the low 256 bits, 2j + 1 over the high
alignas(64) inline constexpr int8_t kPairSel[8 * 64] = {
#define MMA_PAIR(j) \
  2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, \
  2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, \
  2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, \
  2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, \
  2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, \
  2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1
    MMA_PAIR(0), MMA_PAIR(1), MMA_PAIR(2), MMA_PAIR(3), MMA_PAIR(4), MMA_PAIR(5), MMA_PAIR(6), MMA_PAIR(7)
#undef MMA_PAIR
};

struct Avx512 {
  static constexpr const char* kName = "avx512";
  static constexpr int kN = 16;
  static constexpr int kND = 8;
  using F = __m512;
  using I = __m512i;
  using D = __m512d;
  using M = __mmask16;
  using MD = __mmask8;
  using B = __m256i;  // 32 int8 lanes: one panel is 32 columns

  // ---- int32 ----
  MMA_VT512 I set1(int32_t x) { return _mm512_set1_epi32(x); }
  MMA_VT512 I zero() { return _mm512_setzero_si512(); }
  MMA_VT512 I loadu(const void* p) { return _mm512_loadu_si512(p); }
  MMA_VT512 void storeu(void* p, I x) { _mm512_storeu_si512(p, x); }
  MMA_VT512 I add(I a, I b) { return _mm512_add_epi32(a, b); }
  MMA_VT512 I sub(I a, I b) { return _mm512_sub_epi32(a, b); }
  MMA_VT512 I and_(I a, I b) { return _mm512_and_si512(a, b); }
  MMA_VT512 I or_(I a, I b) { return _mm512_or_si512(a, b); }
  MMA_VT512 I xor_(I a, I b) { return _mm512_xor_si512(a, b); }
  MMA_VT512 I max(I a, I b) { return _mm512_max_epi32(a, b); }
  MMA_VT512 I min(I a, I b) { return _mm512_min_epi32(a, b); }
  template <int n> MMA_VT512 I srli(I a) { return _mm512_srli_epi32(a, n); }
  template <int n> MMA_VT512 I slli(I a) { return _mm512_slli_epi32(a, n); }
  MMA_VT512 M eq(I a, I b) { return _mm512_cmpeq_epi32_mask(a, b); }
  MMA_VT512 M gt(I a, I b) { return _mm512_cmpgt_epi32_mask(a, b); }
  MMA_VT512 M ne(I a, I b) { return _mm512_cmpneq_epi32_mask(a, b); }
  MMA_VT512 M outside(I x, int32_t lo, int32_t hi) {  // one unsigned compare
    return _mm512_cmpgt_epu32_mask(_mm512_sub_epi32(x, set1(lo)), set1(hi - lo));
  }
  // the same with the bounds as vectors: lo, hi and hi - lo (each layer takes what it compares)
  MMA_VT512 M outside_v(I x, I lo, I, I span) { return _mm512_cmpgt_epu32_mask(_mm512_sub_epi32(x, lo), span); }
  MMA_VT512 M test(I a, I b) { return _mm512_test_epi32_mask(a, b); }  // (a & b) != 0
  MMA_VT512 I add_maskz(M m, I a, I b) { return _mm512_maskz_add_epi32(m, a, b); }  // m ? a + b : 0
  MMA_VT512 M sign(I a) { return _mm512_movepi32_mask(a); }
  MMA_VT512 I select(M m, I t, I f) { return _mm512_mask_mov_epi32(f, m, t); }
  MMA_VT512 I max_where(M m, I a, I b) { return _mm512_mask_max_epi32(b, m, a, b); }  // m ? max(a, b) : b
  MMA_VT512 I maskz(M m, I a) { return _mm512_maskz_mov_epi32(m, a); }
  MMA_VT512 I or_where(M m, I a, I b) { return _mm512_mask_or_epi32(a, m, a, b); }  // m ? a | b : a
  MMA_VT512 M add_overflow(I r, I s, I t) { return _mm512_movepi32_mask(_mm512_ternarylogic_epi32(r, s, t, 0x18)); }

  // ---- masks ----
  MMA_VT512 M m_and(M a, M b) { return M(a & b); }
  MMA_VT512 M m_or(M a, M b) { return M(a | b); }
  MMA_VT512 M m_andnot(M a, M b) { return M(~a & b); }
  MMA_VT512 M m_not(M a) { return M(~a); }
  MMA_VT512 M m_none() { return M(0); }
  MMA_VT512 uint32_t bits(M m) { return uint32_t(m); }
  MMA_VT512 M m_from_bits(uint32_t b) { return M(b); }  // lane l: bit l

  // ---- fp32 ----
  MMA_VT512 F bcast(const float* p) { return _mm512_set1_ps(*p); }
  MMA_VT512 F set1f(float x) { return _mm512_set1_ps(x); }
  MMA_VT512 F load(const float* p) { return _mm512_loadu_ps(p); }
  MMA_VT512 F loadu_f(const float* p) { return _mm512_loadu_ps(p); }
  MMA_VT512 void storeu_f(float* p, F x) { _mm512_storeu_ps(p, x); }
  MMA_VT512 F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  MMA_VT512 F addf(F a, F b) { return _mm512_add_ps(a, b); }
  MMA_VT512 F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  MMA_VT512 F floorf(F a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
  MMA_VT512 F truncf(F a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
  MMA_VT512 F asf(I a) { return _mm512_castsi512_ps(a); }
  MMA_VT512 I asi(F a) { return _mm512_castps_si512(a); }
  MMA_VT512 I cvtt(F a) { return _mm512_cvttps_epi32(a); }
  template <bool kInRzScope> MMA_VT512 F cvt_rz(I i) {  // embedded rounding: no scope needed
    return _mm512_cvt_roundepi32_ps(i, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  }
  struct RzScope {};
  MMA_VT512 F f16_round(F a) { return _mm512_cvtph_ps(_mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT)); }
  MMA_VT512 M f_eq(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
  MMA_VT512 M f_lt(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  MMA_VT512 F f_select(M m, F t, F f) { return _mm512_mask_mov_ps(f, m, t); }
  MMA_VT512 F f_and(F a, F b) { return _mm512_and_ps(a, b); }
  MMA_VT512 F f_andnot(M m, F a) { return _mm512_maskz_mov_ps(M(~m), a); }

  // ---- 32 int8 lanes (AVX2 registers) ----
  MMA_VT512 B b_set1(int8_t x) { return _mm256_set1_epi8(x); }
  MMA_VT512 B b_load(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  MMA_VT512 B b_adds(B a, B b) { return _mm256_adds_epi8(a, b); }
  MMA_VT512 B b_max(B a, B b) { return _mm256_max_epi8(a, b); }
  MMA_VT512 B b_min(B a, B b) { return _mm256_min_epi8(a, b); }
  // max over k < n (n >= 1) of adds(a[k], b[k * 32 + lane]): two k per 512-bit step (the low
  // half k, the high half k + 1), then one fold.  a's exponents come in with one broadcast
  // load per 16 (8, 4, 2) k, each pair spread by one in-lane shuffle with its control
  // (kPairSel[j]: bytes 2j, then 2j + 1) from memory.  The first pair starts the maximum (no
  // max with a -128 start: with n fixed at compile time `have` folds away)
  MMA_VT512 __m512i b_pairs(__m512i m2, bool& have, __m512i src, int np, const int8_t* b) {
    for (int j = 0; j < np; ++j) {
      const __m512i x = _mm512_adds_epi8(_mm512_shuffle_epi8(src, _mm512_load_si512(kPairSel + 64 * j)),
                                         _mm512_loadu_si512(b + j * 64));
      m2 = have ? _mm512_max_epi8(m2, x) : x;
      have = true;
    }
    return m2;
  }
  MMA_VT512 B b_emax(const int8_t* a, const int8_t* b, int n) {
    __m512i m2 = _mm512_setzero_si512();
    bool have = false;
    int k = 0;
    for (; k + 16 <= n; k += 16)
      m2 = b_pairs(m2, have, _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + k))), 8, b + k * 32);
    if (k + 8 <= n) {
      int64_t q;
      __builtin_memcpy(&q, a + k, 8);
      m2 = b_pairs(m2, have, _mm512_set1_epi64(q), 4, b + k * 32);
      k += 8;
    }
    if (k + 4 <= n) {
      int32_t d;
      __builtin_memcpy(&d, a + k, 4);
      m2 = b_pairs(m2, have, _mm512_set1_epi32(d), 2, b + k * 32);
      k += 4;
    }
    if (k + 2 <= n) {
      int16_t w;
      __builtin_memcpy(&w, a + k, 2);
      m2 = b_pairs(m2, have, _mm512_set1_epi16(w), 1, b + k * 32);
      k += 2;
    }
    B m;
    if (have) {
      m = _mm256_max_epi8(_mm512_castsi512_si256(m2), _mm512_extracti64x4_epi64(m2, 1));
    } else {
      m = b_adds(b_set1(a[k]), b_load(b + k * 32));
      ++k;
    }
    for (; k < n; ++k) m = b_max(m, b_adds(b_set1(a[k]), b_load(b + k * 32)));
    return m;
  }
  MMA_VT512 void b_widen(B b, I* out) {
    out[0] = _mm512_cvtepi8_epi32(_mm256_castsi256_si128(b));
    out[1] = _mm512_cvtepi8_epi32(_mm256_extracti128_si256(b, 1));
  }

  // ---- fp64 ----
  MMA_VT512 D set1d(double x) { return _mm512_set1_pd(x); }
  MMA_VT512 D zerod() { return _mm512_setzero_pd(); }
  MMA_VT512 D loadud(const double* p) { return _mm512_loadu_pd(p); }
  MMA_VT512 void storeud(double* p, D x) { _mm512_storeu_pd(p, x); }
  MMA_VT512 D bcastd(const double* p) { return _mm512_set1_pd(*p); }
  MMA_VT512 D muld(D a, D b) { return _mm512_mul_pd(a, b); }
  MMA_VT512 D addd(D a, D b) { return _mm512_add_pd(a, b); }
  MMA_VT512 D subd(D a, D b) { return _mm512_sub_pd(a, b); }
  MMA_VT512 D fmaddd(D a, D b, D c) { return _mm512_fmadd_pd(a, b, c); }
  MMA_VT512 D floord(D a) { return _mm512_roundscale_pd(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
  MMA_VT512 D truncd(D a) { return _mm512_roundscale_pd(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
  MMA_VT512 MD d_ne(D a, D b) { return _mm512_cmp_pd_mask(a, b, _CMP_NEQ_UQ); }
  MMA_VT512 MD md_or(MD a, MD b) { return MD(a | b); }
  MMA_VT512 MD md_none() { return MD(0); }
  MMA_VT512 uint32_t bitsd(MD m) { return uint32_t(m); }
  MMA_VT512 D d_maskz(MD m, D a) { return _mm512_maskz_mov_pd(m, a); }
  MMA_VT512 MD half_m(M m, int h) { return MD(h ? (m >> 8) : m); }
  MMA_VT512 D half_f(F a, int h) {
    return _mm512_cvtps_pd(h ? _mm512_extractf32x8_ps(a, 1) : _mm512_castps512_ps256(a));
  }
  MMA_VT512 D half_i(I a, int h) {
    return _mm512_cvtepi32_pd(h ? _mm512_extracti64x4_epi64(a, 1) : _mm512_castsi512_si256(a));
  }
  MMA_VT512 D pow2(I e, int h) {
    const __m512i e64 = _mm512_cvtepi32_epi64(h ? _mm512_extracti64x4_epi64(e, 1) : _mm512_castsi512_si256(e));
    return _mm512_castsi512_pd(_mm512_slli_epi64(_mm512_add_epi64(e64, _mm512_set1_epi64(1023)), 52));
  }
  MMA_VT512 D keep_bits(D x, int j, bool down) {  // as in avx2.h
    const __m512i b = _mm512_castpd_si512(x), low = _mm512_set1_epi64((int64_t(1) << j) - 1);
    const __m512i up = down ? _mm512_and_si512(_mm512_srai_epi64(b, 63), low) : _mm512_setzero_si512();
    return _mm512_castsi512_pd(_mm512_andnot_si512(low, _mm512_add_epi64(b, up)));
  }
  MMA_VT512 F join_rne(D lo, D hi) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvt_roundpd_ps(lo, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)),
                              _mm512_cvt_roundpd_ps(hi, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), 1);
  }
  MMA_VT512 F join_rz(D lo, D hi) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvt_roundpd_ps(lo, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC)),
                              _mm512_cvt_roundpd_ps(hi, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC), 1);
  }

  MMA_VT512 void pin(I& a) { asm volatile("" : "+v"(a)); }
  MMA_VT512 void pin(F& a) { asm volatile("" : "+v"(a)); }
  MMA_VT512 void pin(D& a) { asm volatile("" : "+v"(a)); }
  // ---- FTZ-AddMul (kern/values.inc) ----
  // a value whose exponent field is zero (subnormal, +-0) becomes the zero of its sign
  MMA_VT512 F f_ftz(F z) {
    const M sub = _mm512_testn_epi32_mask(_mm512_castps_si512(z), _mm512_set1_epi32(0x7F800000));
    return _mm512_mask_and_ps(z, sub, z, _mm512_castsi512_ps(_mm512_set1_epi32(int32_t(0x80000000u))));
  }
};

}  // namespace simd
}  // namespace mma
