// The vector layer for aarch64 Advanced SIMD (NEON): 4 fp32 / int32 lanes, 2 fp64 lanes,
// masks as all-ones lanes.  The same operations as avx2.h and avx512.h.  Rounding: the
// kernels run under FPCR round to nearest with FZ / FZ16 / AHP clear (fpenv.h); the
// round-toward-zero conversions are built exactly from integer steps or fix-ups.
#pragma once
#include <arm_neon.h>

#include <cstdint>

#define MMA_VTN __attribute__((always_inline)) static inline

namespace mma {
namespace simd {

struct Neon {
  static constexpr const char* kName = "neon";
  static constexpr int kN = 4;
  static constexpr int kND = 2;
  using F = float32x4_t;
  using I = int32x4_t;
  using D = float64x2_t;
  using M = uint32x4_t;
  using MD = uint64x2_t;
  struct B {
    int8x16_t lo, hi;
  };

  // ---- int32 ----
  MMA_VTN I set1(int32_t x) { return vdupq_n_s32(x); }
  MMA_VTN I zero() { return vdupq_n_s32(0); }
  MMA_VTN I loadu(const void* p) { return vld1q_s32(static_cast<const int32_t*>(p)); }
  MMA_VTN void storeu(void* p, I x) { vst1q_s32(static_cast<int32_t*>(p), x); }
  MMA_VTN I add(I a, I b) { return vaddq_s32(a, b); }
  MMA_VTN I sub(I a, I b) { return vsubq_s32(a, b); }
  MMA_VTN I and_(I a, I b) { return vandq_s32(a, b); }
  MMA_VTN I or_(I a, I b) { return vorrq_s32(a, b); }
  MMA_VTN I xor_(I a, I b) { return veorq_s32(a, b); }
  MMA_VTN I max(I a, I b) { return vmaxq_s32(a, b); }
  MMA_VTN I min(I a, I b) { return vminq_s32(a, b); }
  template <int n> MMA_VTN I srli(I a) { return vreinterpretq_s32_u32(vshrq_n_u32(vreinterpretq_u32_s32(a), n)); }
  template <int n> MMA_VTN I slli(I a) { return vshlq_n_s32(a, n); }
  MMA_VTN M eq(I a, I b) { return vceqq_s32(a, b); }
  MMA_VTN M gt(I a, I b) { return vcgtq_s32(a, b); }
  MMA_VTN M ne(I a, I b) { return vmvnq_u32(vceqq_s32(a, b)); }
  MMA_VTN M outside(I x, int32_t lo, int32_t hi) {
    return vorrq_u32(vcltq_s32(x, vdupq_n_s32(lo)), vcgtq_s32(x, vdupq_n_s32(hi)));
  }
  // the same with the bounds as vectors: lo, hi and hi - lo (each layer takes what it compares)
  MMA_VTN M outside_v(I x, I lo, I, I span) { return vcgtq_u32(vreinterpretq_u32_s32(vsubq_s32(x, lo)), vreinterpretq_u32_s32(span)); }
  MMA_VTN M test(I a, I b) { return vtstq_s32(a, b); }  // (a & b) != 0
  MMA_VTN I add_maskz(M m, I a, I b) { return vandq_s32(vreinterpretq_s32_u32(m), vaddq_s32(a, b)); }  // m ? a + b : 0
  MMA_VTN M sign(I a) { return vreinterpretq_u32_s32(vshrq_n_s32(a, 31)); }
  MMA_VTN I select(M m, I t, I f) { return vbslq_s32(m, t, f); }
  MMA_VTN I max_where(M m, I a, I b) { return vbslq_s32(m, vmaxq_s32(a, b), b); }  // m ? max(a, b) : b
  MMA_VTN I maskz(M m, I a) { return vandq_s32(vreinterpretq_s32_u32(m), a); }
  MMA_VTN I or_where(M m, I a, I b) { return vorrq_s32(a, vandq_s32(vreinterpretq_s32_u32(m), b)); }  // m ? a | b : a
  MMA_VTN M add_overflow(I r, I s, I t) { return sign(vandq_s32(veorq_s32(r, s), veorq_s32(r, t))); }

  // ---- masks ----
  MMA_VTN M m_and(M a, M b) { return vandq_u32(a, b); }
  MMA_VTN M m_or(M a, M b) { return vorrq_u32(a, b); }
  MMA_VTN M m_andnot(M a, M b) { return vbicq_u32(b, a); }  // ~a & b
  MMA_VTN M m_not(M a) { return vmvnq_u32(a); }
  MMA_VTN M m_none() { return vdupq_n_u32(0); }
  MMA_VTN uint32_t bits(M m) {
    static const uint32_t w[4] = {1, 2, 4, 8};
    return vaddvq_u32(vandq_u32(m, vld1q_u32(w)));
  }
  MMA_VTN M m_from_bits(uint32_t b) {  // lane l: bit l
    static const uint32_t w[4] = {1, 2, 4, 8};
    const uint32x4_t bit = vld1q_u32(w);
    return vceqq_u32(vandq_u32(vdupq_n_u32(b), bit), bit);
  }

  // ---- fp32 ----
  MMA_VTN F bcast(const float* p) { return vld1q_dup_f32(p); }
  MMA_VTN F set1f(float x) { return vdupq_n_f32(x); }
  MMA_VTN F load(const float* p) { return vld1q_f32(p); }
  MMA_VTN F loadu_f(const float* p) { return vld1q_f32(p); }
  MMA_VTN void storeu_f(float* p, F x) { vst1q_f32(p, x); }
  MMA_VTN F mul(F a, F b) { return vmulq_f32(a, b); }
  MMA_VTN F addf(F a, F b) { return vaddq_f32(a, b); }
  MMA_VTN F fmadd(F a, F b, F c) { return vfmaq_f32(c, a, b); }
  MMA_VTN F floorf(F a) { return vrndmq_f32(a); }
  MMA_VTN F truncf(F a) { return vrndq_f32(a); }
  MMA_VTN F asf(I a) { return vreinterpretq_f32_s32(a); }
  MMA_VTN I asi(F a) { return vreinterpretq_s32_f32(a); }
  MMA_VTN I cvtt(F a) { return vcvtq_s32_f32(a); }  // toward zero (the kernels stay in range)
  // int32 -> fp32 toward zero: keep the top 24 bits of |i| (exact conversion), then the sign
  template <bool kInRzScope> MMA_VTN F cvt_rz(I i) {  // exact integer steps: no scope needed
    const uint32x4_t mag = vreinterpretq_u32_s32(vabsq_s32(i));  // |INT_MIN| = 2^31 unsigned
    const int32x4_t n = vsubq_s32(vdupq_n_s32(32), vclzq_s32(vreinterpretq_s32_u32(mag)));
    const int32x4_t sh = vmaxq_s32(vsubq_s32(n, vdupq_n_s32(24)), vdupq_n_s32(0));
    const uint32x4_t top = vshlq_u32(vshlq_u32(mag, vnegq_s32(sh)), sh);
    const uint32x4_t f = vreinterpretq_u32_f32(vcvtq_f32_u32(top));
    return vreinterpretq_f32_u32(vorrq_u32(f, vandq_u32(vreinterpretq_u32_s32(i), vdupq_n_u32(0x80000000u))));
  }
  struct RzScope {};
  MMA_VTN F f16_round(F a) { return vcvt_f32_f16(vcvt_f16_f32(a)); }
  MMA_VTN M f_eq(F a, F b) { return vceqq_f32(a, b); }
  MMA_VTN M f_lt(F a, F b) { return vcltq_f32(a, b); }
  MMA_VTN F f_select(M m, F t, F f) { return vbslq_f32(m, t, f); }
  MMA_VTN F f_and(F a, F b) { return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(a), vreinterpretq_u32_f32(b))); }
  MMA_VTN F f_andnot(M m, F a) { return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(a), m)); }

  // ---- 32 int8 lanes ----
  MMA_VTN B b_set1(int8_t x) { return B{vdupq_n_s8(x), vdupq_n_s8(x)}; }
  MMA_VTN B b_load(const int8_t* p) { return B{vld1q_s8(p), vld1q_s8(p + 16)}; }
  MMA_VTN B b_adds(B a, B b) { return B{vqaddq_s8(a.lo, b.lo), vqaddq_s8(a.hi, b.hi)}; }
  MMA_VTN B b_max(B a, B b) { return B{vmaxq_s8(a.lo, b.lo), vmaxq_s8(a.hi, b.hi)}; }
  MMA_VTN B b_min(B a, B b) { return B{vminq_s8(a.lo, b.lo), vminq_s8(a.hi, b.hi)}; }
  // max over k < n (n >= 1) of adds(a[k], b[k * 32 + lane])
  MMA_VTN B b_emax(const int8_t* a, const int8_t* b, int n) {
    B m = b_adds(b_set1(a[0]), b_load(b));
    for (int k = 1; k < n; ++k) m = b_max(m, b_adds(b_set1(a[k]), b_load(b + k * 32)));
    return m;
  }
  MMA_VTN void b_widen(B b, I* out) {
    const int8x16_t h[2] = {b.lo, b.hi};
    for (int t = 0; t < 2; ++t) {
      const int16x8_t lo = vmovl_s8(vget_low_s8(h[t])), hi = vmovl_high_s8(h[t]);
      out[4 * t + 0] = vmovl_s16(vget_low_s16(lo));
      out[4 * t + 1] = vmovl_high_s16(lo);
      out[4 * t + 2] = vmovl_s16(vget_low_s16(hi));
      out[4 * t + 3] = vmovl_high_s16(hi);
    }
  }

  // ---- fp64 ----
  MMA_VTN D set1d(double x) { return vdupq_n_f64(x); }
  MMA_VTN D zerod() { return vdupq_n_f64(0.0); }
  MMA_VTN D loadud(const double* p) { return vld1q_f64(p); }
  MMA_VTN void storeud(double* p, D x) { vst1q_f64(p, x); }
  MMA_VTN D bcastd(const double* p) { return vld1q_dup_f64(p); }
  MMA_VTN D muld(D a, D b) { return vmulq_f64(a, b); }
  MMA_VTN D addd(D a, D b) { return vaddq_f64(a, b); }
  MMA_VTN D subd(D a, D b) { return vsubq_f64(a, b); }
  MMA_VTN D fmaddd(D a, D b, D c) { return vfmaq_f64(c, a, b); }
  MMA_VTN D floord(D a) { return vrndmq_f64(a); }
  MMA_VTN D truncd(D a) { return vrndq_f64(a); }
  MMA_VTN MD d_ne(D a, D b) { return veorq_u64(vceqq_f64(a, b), vdupq_n_u64(~uint64_t(0))); }
  MMA_VTN MD md_or(MD a, MD b) { return vorrq_u64(a, b); }
  MMA_VTN MD md_none() { return vdupq_n_u64(0); }
  MMA_VTN uint32_t bitsd(MD m) { return uint32_t((vgetq_lane_u64(m, 0) & 1) | ((vgetq_lane_u64(m, 1) & 1) << 1)); }
  MMA_VTN D d_maskz(MD m, D a) { return vreinterpretq_f64_u64(vandq_u64(m, vreinterpretq_u64_f64(a))); }
  MMA_VTN MD half_m(M m, int h) {
    const int32x4_t s = vreinterpretq_s32_u32(m);
    return vreinterpretq_u64_s64(h ? vmovl_high_s32(s) : vmovl_s32(vget_low_s32(s)));
  }
  MMA_VTN D half_f(F a, int h) { return h ? vcvt_high_f64_f32(a) : vcvt_f64_f32(vget_low_f32(a)); }
  MMA_VTN D half_i(I a, int h) { return vcvtq_f64_s64(h ? vmovl_high_s32(a) : vmovl_s32(vget_low_s32(a))); }
  MMA_VTN D pow2(I e, int h) {
    const int64x2_t e64 = h ? vmovl_high_s32(e) : vmovl_s32(vget_low_s32(e));
    return vreinterpretq_f64_s64(vshlq_n_s64(vaddq_s64(e64, vdupq_n_s64(1023)), 52));
  }
  MMA_VTN D keep_bits(D x, int j, bool down) {  // as in avx2.h
    const int64x2_t b = vreinterpretq_s64_f64(x), low = vdupq_n_s64((int64_t(1) << j) - 1);
    const int64x2_t up = down ? vandq_s64(vshrq_n_s64(b, 63), low) : vdupq_n_s64(0);
    return vreinterpretq_f64_s64(vbicq_s64(vaddq_s64(b, up), low));
  }
  MMA_VTN F join_rne(D lo, D hi) { return vcvt_high_f32_f64(vcvt_f32_f64(lo), hi); }
  // toward zero: the nearest conversion, one step back where its magnitude went up
  MMA_VTN F join_rz(D lo, D hi) {
    const F f = join_rne(lo, hi);
    const uint64x2_t ua = vcagtq_f64(vcvt_f64_f32(vget_low_f32(f)), lo);
    const uint64x2_t ub = vcagtq_f64(vcvt_high_f64_f32(f), hi);
    const uint32x4_t up = vcombine_u32(vmovn_u64(ua), vmovn_u64(ub));
    return vreinterpretq_f32_u32(vaddq_u32(vreinterpretq_u32_f32(f), up));  // up = -1: one step down
  }

  MMA_VTN void pin(I& a) { asm volatile("" : "+w"(a)); }
  MMA_VTN void pin(F& a) { asm volatile("" : "+w"(a)); }
  MMA_VTN void pin(D& a) { asm volatile("" : "+w"(a)); }
  // ---- FTZ-AddMul (kern/values.inc) ----
  // a value whose exponent field is zero (subnormal, +-0) becomes the zero of its sign
  MMA_VTN F f_ftz(F z) {
    const uint32x4_t u = vreinterpretq_u32_f32(z);
    const uint32x4_t keep = vtstq_u32(u, vdupq_n_u32(0x7F800000u));
    return vreinterpretq_f32_u32(vandq_u32(u, vorrq_u32(keep, vdupq_n_u32(0x80000000u))));
  }
};

}  // namespace simd
}  // namespace mma
