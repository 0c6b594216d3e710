// The FDPA kernels of kern/ compiled for x86 AVX-512 (F, BW, VL, DQ), and its fill of the
// planes from fp16 / bf16 / tf32 / fp8 codes.
#include "fdpa_engine.h"
#include "values_engine.h"

#include <array>
#include <utility>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(MMA_EMU_NO_SIMD)
#include <cpuid.h>

#include <cstring>

#include "simd/avx512.h"

namespace mma {
namespace k_avx512 {
using V = simd::Avx512;
#define MMA_K MMA_KT512
// T-FDPA's terms unrolled 16 k at a time, two int32 groups a chunk (L = 16 / 32 rows 1-9%
// faster in kern_bench than GCC's loop; the same on AVX2 is 3-12% slower: 16 ymm registers)
#define MMA_T_UNROLL_TERMS _Pragma("GCC unroll 16")
#define MMA_T_UNROLL_GROUPS _Pragma("GCC unroll 2")
#include "kern/common.inc"
#include "kern/t_fdpa.inc"
#include "kern/tr_fdpa.inc"
#include "kern/e_fdpa.inc"
#include "kern/gst_fdpa.inc"
#include "kern/values.inc"
#include "kern/tables.inc"

// ---- Codes straight to the planes (fdpa_engine.h DirectFill) ----
// The planes of fdpa_engine.cpp's plane_of_code, 32 codes a step (a third of the plain
// loops' time for fp16): the value (a zero's sign dropped) by F16C for fp16 and the NVIDIA
// fp8 codes (widened to fp16 codes: e5m2 is fp16's top byte, e4m3fn's bits below fp16's
// sign give its value times 2^-8), by a shift for bf16, a mask for tf32; the exponent byte
// from the exponent field (subnormals at emin; bf16 / tf32 ones are outside the window);
// -128 for a zero.  h: 32 codes as 16-bit words (fp8 widened as said).
template <PlaneCode C>
MMA_K inline __m512 values16(__m256i x) {
  if (C == PlaneCode::kBf16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(x), 16));
  const __m512 f = _mm512_cvtph_ps(x);
  return C == PlaneCode::kE4m3Fn ? _mm512_mul_ps(f, _mm512_set1_ps(256.0f)) : f;
}
template <PlaneCode C>
MMA_K inline __mmask32 planes32(__m512i h, __mmask32 lanes, float* v, int8_t* e) {
  using P = PlaneCode;
  const __mmask32 nz = _mm512_mask_test_epi16_mask(lanes, h, _mm512_set1_epi16(0x7FFF));
  const __m512i hz = _mm512_maskz_mov_epi16(nz, h);
  const __m256i lo = _mm512_castsi512_si256(hz), hi = _mm512_extracti64x4_epi64(hz, 1);
  _mm512_mask_storeu_ps(v, __mmask16(lanes), values16<C>(lo));
  _mm512_mask_storeu_ps(v + 16, __mmask16(lanes >> 16), values16<C>(hi));
  constexpr bool kWide = C == P::kBf16, k43 = C == P::kE4m3Fn;
  constexpr int kMb = kWide ? 7 : 10, kEmask = kWide ? 255 : k43 ? 15 : 31, kBias = kWide ? 127 : k43 ? 7 : 15;
  const __m512i ex = _mm512_and_si512(_mm512_srli_epi16(h, kMb), _mm512_set1_epi16(kEmask));
  __m512i x = _mm512_sub_epi16(ex, _mm512_set1_epi16(kBias));
  if (!kWide) x = _mm512_mask_mov_epi16(x, _mm512_cmpeq_epi16_mask(ex, _mm512_setzero_si512()), _mm512_set1_epi16(1 - kBias));
  x = _mm512_mask_mov_epi16(x, __mmask32(~nz), _mm512_set1_epi16(-128));
  _mm256_mask_storeu_epi8(e, lanes, _mm512_cvtepi16_epi8(x));
  // fp16 / fp8: every exponent in the window; NaN / infinity codes
  if (k43) return _mm512_mask_cmpeq_epi16_mask(lanes, _mm512_and_si512(h, _mm512_set1_epi16(0x7FFF)), _mm512_set1_epi16(0x3F80));
  if (!kWide) return _mm512_mask_cmpeq_epi16_mask(lanes, ex, _mm512_set1_epi16(31));
  // bf16: NaN / infinity (255), subnormal (0) and the rest outside [bias - 31, bias + 31]
  return _mm512_mask_cmpgt_epu16_mask(nz, _mm512_sub_epi16(ex, _mm512_set1_epi16(kBias - kPlaneWindow)),
                                      _mm512_set1_epi16(2 * kPlaneWindow));
}
// 16 tf32 codes (fp32 words, the low 13 bits dropped)
MMA_K inline __mmask16 tf32_planes16(__m512i w, __mmask16 lanes, float* v, int8_t* e) {
  const __mmask16 nz = _mm512_mask_test_epi32_mask(lanes, w, _mm512_set1_epi32(0x7FFFE000));
  _mm512_mask_storeu_ps(v, lanes, _mm512_castsi512_ps(_mm512_maskz_and_epi32(nz, w, _mm512_set1_epi32(int(0xFFFFE000u)))));
  const __m512i ex = _mm512_and_si512(_mm512_srli_epi32(w, 23), _mm512_set1_epi32(255));
  const __m512i x = _mm512_mask_sub_epi32(_mm512_set1_epi32(-128), nz, ex, _mm512_set1_epi32(127));
  _mm512_mask_cvtepi32_storeu_epi8(e, lanes, x);
  return _mm512_mask_cmpgt_epu32_mask(nz, _mm512_sub_epi32(ex, _mm512_set1_epi32(127 - kPlaneWindow)),
                                      _mm512_set1_epi32(2 * kPlaneWindow));
}
// 32 codes at c (the first n < 32 when n is less) to v, e
template <PlaneCode C>
MMA_K inline uint32_t planes_at(const uint8_t* c, int64_t n, float* v, int8_t* e) {
  const __mmask32 lanes = n >= 32 ? ~__mmask32(0) : (__mmask32(1) << n) - 1;
  if (C == PlaneCode::kE5m2 || C == PlaneCode::kE4m3Fn) {
    const __m512i b = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(lanes, c));
    const __m512i h = C == PlaneCode::kE5m2 ? _mm512_slli_epi16(b, 8)
                      : _mm512_or_si512(_mm512_slli_epi16(_mm512_and_si512(b, _mm512_set1_epi16(0x80)), 8),
                                        _mm512_slli_epi16(_mm512_and_si512(b, _mm512_set1_epi16(0x7F)), 7));
    return planes32<C>(h, lanes, v, e);
  }
  if (C != PlaneCode::kTf32) return planes32<C>(_mm512_maskz_loadu_epi16(lanes, c), lanes, v, e);
  const __mmask16 l0 = __mmask16(lanes), l1 = __mmask16(lanes >> 16);
  const uint32_t b0 = tf32_planes16(_mm512_maskz_loadu_epi32(l0, c), l0, v, e);
  return b0 | (l1 ? tf32_planes16(_mm512_maskz_loadu_epi32(l1, c + 64), l1, v + 16, e + 16) : 0u);
}
template <PlaneCode C>
MMA_K uint8_t direct_row(const uint8_t* c, int64_t n, float* v, int8_t* e) {
  constexpr int64_t kSize = plane_code_bytes(C);
  uint32_t bad = 0;
  for (int64_t k = 0; k < n; k += 32) bad |= planes_at<C>(c + k * kSize, n - k, v + k, e + k);
  return uint8_t(bad != 0);
}
template <PlaneCode C>
MMA_K uint8_t direct_panels(const uint8_t* b, int64_t sk, int64_t k0, int64_t k1, int64_t n,
                            int64_t pstride, const int32_t* pos, float* v, int8_t* e) {
  static_assert(kW == 32, "a panel row is 32 codes");
  constexpr int64_t kSize = plane_code_bytes(C);
  uint32_t bad = 0;
  for (int64_t j0 = 0; j0 < n; j0 += kW, v += pstride, e += pstride)
    for (int64_t k = k0; k < k1; ++k)
      bad |= planes_at<C>(b + k * sk + j0 * kSize, n - j0, v + (pos ? pos[k] : k) * kW, e + (pos ? pos[k] : k) * kW);
  return uint8_t(bad != 0);
}
#undef MMA_K
}  // namespace k_avx512
ValueKernels value_kernels_avx512_wide() { return k_avx512::value_table(); }
// The FMA / FTZ-AddMul kernels with 512-bit registers measured slower than the AVX2 ones on
// a Zen 4 machine (fp64 FMA 1.4e10 vs 1.7e10, FTZ 4.1e9 vs 5.5e9 MAC/s) and faster on a
// Sapphire Rapids-class Xeon (scripts/kern_bench, docs/cpu_fast.md "Per core": FTZ 2.4x,
// fp32 FMA 1.5x, fp64 1.2x): AMD CPUs (vendor from CPUID) run the AVX2 ones, others these.
// Same bits either way (one IEEE sequence per lane).
static bool cpu_is_amd() {
  static const bool amd = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
    char v[13];
    std::memcpy(v, &b, 4);
    std::memcpy(v + 4, &d, 4);
    std::memcpy(v + 8, &c, 4);
    v[12] = 0;
    return std::strcmp(v, "AuthenticAMD") == 0 || std::strcmp(v, "HygonGenuine") == 0;
  }();
  return amd;
}
ValueKernels value_kernels_avx512() { return cpu_is_amd() ? value_kernels_avx2() : value_kernels_avx512_wide(); }
FdpaKernels fdpa_kernels_avx512() {
  using namespace k_avx512;
  FdpaKernels k = fdpa_table();
  k.direct[int(PlaneCode::kFp16)] = {direct_row<PlaneCode::kFp16>, direct_panels<PlaneCode::kFp16>};
  k.direct[int(PlaneCode::kBf16)] = {direct_row<PlaneCode::kBf16>, direct_panels<PlaneCode::kBf16>};
  k.direct[int(PlaneCode::kTf32)] = {direct_row<PlaneCode::kTf32>, direct_panels<PlaneCode::kTf32>};
  k.direct[int(PlaneCode::kE4m3Fn)] = {direct_row<PlaneCode::kE4m3Fn>, direct_panels<PlaneCode::kE4m3Fn>};
  k.direct[int(PlaneCode::kE5m2)] = {direct_row<PlaneCode::kE5m2>, direct_panels<PlaneCode::kE5m2>};
  return k;
}
}  // namespace mma
#else
namespace mma {
FdpaKernels fdpa_kernels_avx512() { return FdpaKernels{}; }
ValueKernels value_kernels_avx512() { return ValueKernels{}; }
ValueKernels value_kernels_avx512_wide() { return ValueKernels{}; }
}  // namespace mma
#endif
