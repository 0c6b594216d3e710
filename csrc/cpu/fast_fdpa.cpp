// Vectorised T-FDPA / ST-FDPA (seed 003 Algorithms 7-8) for x86 AVX2: 32 outputs of one row
// per micro-kernel step, 8 int32 lanes per register, across output columns.
//
// Why it is exact (docs/cpu_fast.md): the core's term for product k of a chunk is
// RZ(a_k * b_k * 2^(F - emax)) and its c term RZ(c * 2^(F - emax)).  Inside the plane window
// (|decoded exponent| <= 31, finite operands) a_k * b_k is an exact fp32 product, scaling by a
// normal power of two is exact (or leaves a magnitude < 1 that truncates to 0 anyway), and
// cvttps2dq truncates toward zero: the int32 lanes hold exactly the core's terms.  Their sum
// is rounded toward zero to fp32 by cvtdq2ps under MXCSR round-toward-zero (E8M13: low bits
// masked) and emax - F is added to the exponent field.  Lanes whose sum may have overflowed
// int32, whose result is subnormal or overflows, whose accumulator is not finite, or whose
// scale 2^(F - emax) is not a normal float run that chunk through the core (fused_op); rows
// and columns outside the window (NaN, Inf, huge or tiny exponents) run dot_fused entirely.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "fast_paths.h"
#include "fpenv.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(MMA_EMU_NO_SIMD)
#include <immintrin.h>
#define MMA_FAST_X86 1
#define MMA_AVX2 __attribute__((target("avx2,fma,f16c")))
#define MMA_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))
#endif

namespace mma {

constexpr int kW = 32;  // output columns per panel (4 x 8 lanes)

// A as value + int8 exponent planes (M, Kp); B as panels [NP][Kp][32].  Zero operands and
// rows/columns outside the window hold value 0 and exponent -128.
struct Planes {
  int64_t M = 0, N = 0, K = 0, Kp = 0, NP = 0;
  std::vector<float> av, bv;
  std::vector<int8_t> ae, be;
  std::vector<uint8_t> row_ok, col_ok;
  // GST-FDPA only: scale values sig * 2^(exp - mbits) and exponents, A as (M, nblk), B as
  // panels [NP][nblk][32]
  std::vector<double> sav, sbv;
  std::vector<int32_t> sae, sbe;
};

namespace {

constexpr int kWindow = 31;      // plane window: |decoded exponent (+ scale exponent)| <= 31
constexpr int32_t kNone = -1000; // lane exponent when no product is nonzero and c is zero
constexpr int64_t kRowBlock = 16;

// sig * 2^(e - mbits) as an fp32 (exact: |sig| < 2^11, e - mbits in [-41, 31]).
inline float plane_value(int32_t sig, int32_t e, int32_t mbits) {
  if (e - mbits < -120)  // E-FDPA planes (no window): two normal scalings, exact result
    return float(sig) * f32_of(uint32_t(e - mbits + 64 + 127) << 23) * f32_of(uint32_t(127 - 64) << 23);
  return float(sig) * f32_of(uint32_t(e - mbits + 127) << 23);
}

// One operand row (A row i or B column j): true when it can use the planes.
template <class Store>
bool fill_row(const Operand& r, int64_t K, int32_t mbits, const Dec* sc, int32_t block,
              uint8_t flags, bool window, Store store) {
  if (flags) return false;
  for (int64_t k = 0; k < K && window; ++k)
    if (r.sig[k] != 0) {
      const int32_t e = r.exp[k] + (sc ? sc[k / block].exp : 0);
      if (e < -kWindow || e > kWindow) return false;
    }
  for (int64_t k = 0; k < K; ++k) {
    if (r.sig[k] == 0) { store(k, 0.0f, int8_t(-128)); continue; }
    const int32_t e = r.exp[k] + (sc ? sc[k / block].exp : 0);
    store(k, plane_value(r.sig[k], e, mbits), int8_t(e));
  }
  return true;
}

void build_planes(const Params& P, const Decoded& A, const Decoded& B, const Dec* SA,
                  const Dec* SB, const uint8_t* fsa, const uint8_t* fsb, int64_t nblk, int64_t M,
                  int64_t N, int64_t K, Planes& pl) {
  pl.M = M; pl.N = N; pl.K = K;
  pl.Kp = (K + P.L - 1) / P.L * P.L;
  pl.NP = (N + kW - 1) / kW;
  const int64_t Kp = pl.Kp;
  pl.av.assign(size_t(M * Kp), 0.0f);
  pl.ae.assign(size_t(M * Kp), int8_t(-128));
  pl.bv.assign(size_t(pl.NP * Kp * kW), 0.0f);
  pl.be.assign(size_t(pl.NP * Kp * kW), int8_t(-128));
  pl.row_ok.assign(size_t(M), 0);
  pl.col_ok.assign(size_t(pl.NP * kW), 0);
  const bool gst = P.op == kGstFdpa;
  const bool scaled = SA != nullptr && !gst;  // ST-FDPA folds the scale exponents in
  const bool window = P.op != kEFdpa;  // E-FDPA reads values only (exponent plane unused)
  if (gst) {
    auto sval = [&](const Dec& d) { return double(d.sig) * std::ldexp(1.0, d.exp - P.fs.mbits); };
    pl.sav.resize(size_t(M * nblk));
    pl.sae.resize(size_t(M * nblk));
    pl.sbv.assign(size_t(pl.NP * nblk * kW), 0.0);
    pl.sbe.assign(size_t(pl.NP * nblk * kW), 0);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t b = 0; b < nblk; ++b) {
        const Dec& d = SA[i * nblk + b];
        pl.sav[size_t(i * nblk + b)] = d.cls == kFinite ? sval(d) : 0.0;
        pl.sae[size_t(i * nblk + b)] = d.exp;
      }
    for (int64_t j = 0; j < N; ++j)
      for (int64_t b = 0; b < nblk; ++b) {
        const Dec& d = SB[j * nblk + b];
        const size_t at = size_t(((j / kW) * nblk + b) * kW + j % kW);
        pl.sbv[at] = d.cls == kFinite ? sval(d) : 0.0;
        pl.sbe[at] = d.exp;
      }
  }
  at::parallel_for(0, M, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      float* v = pl.av.data() + i * Kp;
      int8_t* e = pl.ae.data() + i * Kp;
      const bool ok = fill_row(A.row(i, K), K, P.fa.mbits, scaled ? SA + i * nblk : nullptr,
                               P.block, A.row_flags[size_t(i)] | (SA ? fsa[i] : 0), window,
                               [&](int64_t k, float x, int8_t ex) { v[k] = x; e[k] = ex; });
      pl.row_ok[size_t(i)] = ok;
      if (!ok) { std::fill(v, v + Kp, 0.0f); std::fill(e, e + Kp, int8_t(-128)); }
    }
  });
  at::parallel_for(0, N, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t j = lo; j < hi; ++j) {
      float* v = pl.bv.data() + (j / kW) * Kp * kW + j % kW;
      int8_t* e = pl.be.data() + (j / kW) * Kp * kW + j % kW;
      const bool ok = fill_row(B.row(j, K), K, P.fb.mbits, scaled ? SB + j * nblk : nullptr,
                               P.block, B.row_flags[size_t(j)] | (SB ? fsb[j] : 0), window,
                               [&](int64_t k, float x, int8_t ex) { v[k * kW] = x; e[k * kW] = ex; });
      pl.col_ok[size_t(j)] = ok;
      if (!ok)
        for (int64_t k = 0; k < K; ++k) { v[k * kW] = 0.0f; e[k * kW] = int8_t(-128); }
    }
  });
}

// The core's chunk, for the lanes the vector code hands back.
struct Fallback {
  const Params* P;
  OutFmt o;
  const Decoded* A;
  const Decoded* B;
  const Dec* SA;
  const Dec* SB;
  int64_t nblk, K;
  uint32_t chunk(int64_t i, int64_t j, int64_t k0, uint32_t acc) const {
    if (P->rho == kRneFp16) return f32_bits_of_f16(uint32_t(chunk_bits(i, j, k0, f16_bits_of_f32(acc))));
    return uint32_t(chunk_bits(i, j, k0, acc));
  }
  uint64_t chunk_bits(int64_t i, int64_t j, int64_t k0, uint64_t acc) const {
    const Chunk ch{A->row(i, K).shifted(int(k0)), B->row(j, K).shifted(int(k0)),
                   int(std::min<int64_t>(P->L, K - k0)), int(k0),
                   SA ? SA + i * nblk : nullptr, SB ? SB + j * nblk : nullptr};
    return fused_op(*P, o, ch, acc, false);
  }
};

#ifdef MMA_FAST_X86
// Chunks [kc0, kc1) of rows [i0, i1) x panel p; acc: fp32 bits, row stride ldacc.
MMA_AVX2 void fdpa_panel_avx2(const Params& P, const Planes& pl, const Fallback& fb,
                              int64_t i0, int64_t i1, int64_t p, int64_t kc0, int64_t kc1,
                              uint32_t* acc, int64_t ldacc) {
  const int L = P.L, F = P.F;
  const int gmax = 1 << (29 - F);  // terms per int32 partial sum that cannot overflow
  const int64_t Kp = pl.Kp;
  const __m256i vF = _mm256_set1_epi32(F), vNone = _mm256_set1_epi32(kNone);
  const __m256i vFloor = _mm256_set1_epi32(std::max(P.emax_floor, kNone + 1));
  const __m256i vEmin = _mm256_set1_epi32(P.fo.emin()), v127 = _mm256_set1_epi32(127);
  const bool half = P.rho == kRneFp16;
  const __m256i vFF = _mm256_set1_epi32(0xFF), vAbs = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i v1 = _mm256_set1_epi32(1), v254 = _mm256_set1_epi32(254);
  const __m256i vLow = _mm256_set1_epi32(-65), vZero = _mm256_setzero_si256();
  const __m256i vRmask = _mm256_set1_epi32(P.rho == kRzE8m13 ? int32_t(~0x3FFu) : -1);
  uint32_t okmask = 0;
  for (int l = 0; l < kW; ++l) okmask |= uint32_t(pl.col_ok[size_t(p * kW + l)]) << l;
  const float* bvp = pl.bv.data() + p * Kp * kW;
  const int8_t* bep = pl.be.data() + p * Kp * kW;
  for (int64_t i = i0; i < i1; ++i) {
    if (!pl.row_ok[size_t(i)] || okmask == 0) continue;
    const float* av = pl.av.data() + i * Kp;
    const int8_t* ae = pl.ae.data() + i * Kp;
    uint32_t* ap = acc + (i - i0) * ldacc + p * kW;
    __m256i c[4];
    for (int v = 0; v < 4; ++v) c[v] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ap + 8 * v));
    for (int64_t k0 = kc0; k0 < kc1; k0 += L) {
      // emax of the products: int8 planes, saturating add, byte max (32 lanes at once)
      __m256i m8 = _mm256_set1_epi8(-128);
      for (int k = 0; k < L; ++k)
        m8 = _mm256_max_epi8(m8, _mm256_adds_epi8(_mm256_set1_epi8(ae[k0 + k]),
                                                  _mm256_load_si256(reinterpret_cast<const __m256i*>(bep + (k0 + k) * kW))));
      const __m128i lo = _mm256_castsi256_si128(m8), hi = _mm256_extracti128_si256(m8, 1);
      const __m256i pe[4] = {_mm256_cvtepi8_epi32(lo), _mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)),
                             _mm256_cvtepi8_epi32(hi), _mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))};
      __m256 scale[4];
      __m256i S[4], em[4], bad[4], zero[4];
      for (int v = 0; v < 4; ++v) {
        const __m256i E = _mm256_and_si256(_mm256_srli_epi32(c[v], 23), vFF);
        const __m256i cz = _mm256_cmpeq_epi32(_mm256_and_si256(c[v], vAbs), vZero);
        __m256i ce = _mm256_max_epi32(_mm256_sub_epi32(E, v127), vEmin);
        ce = _mm256_blendv_epi8(ce, vNone, cz);
        const __m256i pv = _mm256_blendv_epi8(vNone, pe[v], _mm256_cmpgt_epi32(pe[v], vLow));
        __m256i e = _mm256_max_epi32(pv, ce);
        zero[v] = _mm256_cmpeq_epi32(e, vNone);
        e = _mm256_max_epi32(e, vFloor);
        const __m256i se = _mm256_add_epi32(_mm256_sub_epi32(vF, e), v127);
        __m256i b = _mm256_or_si256(_mm256_cmpgt_epi32(v1, se), _mm256_cmpgt_epi32(se, v254));
        b = _mm256_or_si256(b, _mm256_cmpeq_epi32(E, vFF));  // accumulator NaN / Inf
        bad[v] = _mm256_andnot_si256(zero[v], b);
        scale[v] = _mm256_castsi256_ps(_mm256_slli_epi32(se, 23));
        S[v] = _mm256_cvttps_epi32(_mm256_mul_ps(_mm256_castsi256_ps(c[v]), scale[v]));
        em[v] = e;
      }
      // terms: exact fp32 products, exact power-of-two scaling, truncation toward zero
      for (int g0 = 0; g0 < L; g0 += gmax) {
        const int g1 = std::min(L, g0 + gmax);
        __m256i T0 = vZero, T1 = vZero, T2 = vZero, T3 = vZero;
        for (int k = g0; k < g1; ++k) {
          const __m256 a = _mm256_broadcast_ss(av + k0 + k);
          const float* b = bvp + (k0 + k) * kW;
          T0 = _mm256_add_epi32(T0, _mm256_cvttps_epi32(_mm256_mul_ps(_mm256_mul_ps(a, _mm256_load_ps(b)), scale[0])));
          T1 = _mm256_add_epi32(T1, _mm256_cvttps_epi32(_mm256_mul_ps(_mm256_mul_ps(a, _mm256_load_ps(b + 8)), scale[1])));
          T2 = _mm256_add_epi32(T2, _mm256_cvttps_epi32(_mm256_mul_ps(_mm256_mul_ps(a, _mm256_load_ps(b + 16)), scale[2])));
          T3 = _mm256_add_epi32(T3, _mm256_cvttps_epi32(_mm256_mul_ps(_mm256_mul_ps(a, _mm256_load_ps(b + 24)), scale[3])));
          // keeps GCC from reassociating the four chains into a spilling schedule
          asm volatile("" : "+x"(T0), "+x"(T1), "+x"(T2), "+x"(T3));
        }
        const __m256i T[4] = {T0, T1, T2, T3};
        for (int v = 0; v < 4; ++v) {
          const __m256i r = _mm256_add_epi32(S[v], T[v]);
          const __m256i ovf = _mm256_and_si256(_mm256_xor_si256(r, S[v]), _mm256_xor_si256(r, T[v]));
          bad[v] = _mm256_or_si256(bad[v], _mm256_srai_epi32(ovf, 31));
          S[v] = r;
        }
      }
      // RZ to fp32 (MXCSR is round-toward-zero here), then add emax - F to the exponent
      uint32_t badmask = 0;
      __m256i old[4];
      for (int v = 0; v < 4; ++v) {
        old[v] = c[v];
        __m256i fs = _mm256_and_si256(_mm256_castps_si256(_mm256_cvtepi32_ps(S[v])), vRmask);
        // fp16: round to odd at 24 bits (sticky in the last bit), RNE to fp16 below
        if (half)
          fs = _mm256_or_si256(fs, _mm256_srli_epi32(_mm256_andnot_si256(
              _mm256_cmpeq_epi32(_mm256_cvttps_epi32(_mm256_castsi256_ps(fs)), S[v]), _mm256_set1_epi32(-1)), 31));
        const __m256i d = _mm256_sub_epi32(em[v], vF);
        const __m256i ne = _mm256_add_epi32(_mm256_and_si256(_mm256_srli_epi32(fs, 23), vFF), d);
        const __m256i nz = _mm256_andnot_si256(_mm256_cmpeq_epi32(S[v], vZero), _mm256_cmpeq_epi32(vZero, vZero));
        const __m256i range = _mm256_or_si256(_mm256_cmpgt_epi32(v1, ne), _mm256_cmpgt_epi32(ne, v254));
        const __m256i b = _mm256_or_si256(bad[v], _mm256_and_si256(nz, range));
        const __m256i res = _mm256_and_si256(_mm256_add_epi32(fs, _mm256_slli_epi32(d, 23)), nz);
        c[v] = _mm256_andnot_si256(zero[v], res);
        if (half)
          c[v] = _mm256_castps_si256(_mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_castsi256_ps(c[v]), _MM_FROUND_TO_NEAREST_INT)));
        badmask |= uint32_t(_mm256_movemask_ps(_mm256_castsi256_ps(b))) << (8 * v);
      }
      badmask &= okmask;
      if (badmask) {  // rare: the core finishes these lanes' chunk exactly
        alignas(32) uint32_t o[kW], n[kW];
        for (int v = 0; v < 4; ++v) {
          _mm256_store_si256(reinterpret_cast<__m256i*>(o + 8 * v), old[v]);
          _mm256_store_si256(reinterpret_cast<__m256i*>(n + 8 * v), c[v]);
        }
        for (uint32_t m = badmask; m; m &= m - 1) {
          const int l = __builtin_ctz(m);
          n[l] = fb.chunk(i, p * kW + l, k0, o[l]);
        }
        for (int v = 0; v < 4; ++v) c[v] = _mm256_load_si256(reinterpret_cast<const __m256i*>(n + 8 * v));
      }
    }
    for (int v = 0; v < 4; ++v) _mm256_storeu_si256(reinterpret_cast<__m256i*>(ap + 8 * v), c[v]);
  }
}

// The same step with AVX-512: 2 x 16 lanes, mask registers for the lane flags and embedded
// round-toward-zero for the int32 -> fp32 conversion.
MMA_AVX512 void fdpa_panel_avx512(const Params& P, const Planes& pl, const Fallback& fb,
                                  int64_t i0, int64_t i1, int64_t p, int64_t kc0, int64_t kc1,
                                  uint32_t* acc, int64_t ldacc) {
  const int L = P.L, F = P.F;
  const int gmax = 1 << (29 - F);
  const int64_t Kp = pl.Kp;
  const __m512i vF = _mm512_set1_epi32(F), vNone = _mm512_set1_epi32(kNone);
  const __m512i vFloor = _mm512_set1_epi32(std::max(P.emax_floor, kNone + 1));
  const __m512i vEmin = _mm512_set1_epi32(P.fo.emin()), v127 = _mm512_set1_epi32(127);
  const bool half = P.rho == kRneFp16;
  const __m512i vF127 = _mm512_set1_epi32(F + 127);
  const __m512i vFF = _mm512_set1_epi32(0xFF), vAbs = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512i v1 = _mm512_set1_epi32(1), v253 = _mm512_set1_epi32(253);
  const __m512i vLow = _mm512_set1_epi32(-65), vZero = _mm512_setzero_si512();
  const __m512i vRmask = _mm512_set1_epi32(P.rho == kRzE8m13 ? int32_t(~0x3FFu) : -1);
  uint32_t okmask = 0;
  for (int l = 0; l < kW; ++l) okmask |= uint32_t(pl.col_ok[size_t(p * kW + l)]) << l;
  const float* bvp = pl.bv.data() + p * Kp * kW;
  const int8_t* bep = pl.be.data() + p * Kp * kW;
  for (int64_t i = i0; i < i1; ++i) {
    if (!pl.row_ok[size_t(i)] || okmask == 0) continue;
    const float* av = pl.av.data() + i * Kp;
    const int8_t* ae = pl.ae.data() + i * Kp;
    uint32_t* ap = acc + (i - i0) * ldacc + p * kW;
    __m512i c0 = _mm512_loadu_si512(ap), c1 = _mm512_loadu_si512(ap + 16);
    for (int64_t k0 = kc0; k0 < kc1; k0 += L) {
      __m256i m8 = _mm256_set1_epi8(-128);
      for (int k = 0; k < L; ++k)
        m8 = _mm256_max_epi8(m8, _mm256_adds_epi8(_mm256_set1_epi8(ae[k0 + k]),
                                                  _mm256_load_si256(reinterpret_cast<const __m256i*>(bep + (k0 + k) * kW))));
      const __m512i pe[2] = {_mm512_cvtepi8_epi32(_mm256_castsi256_si128(m8)),
                             _mm512_cvtepi8_epi32(_mm256_extracti128_si256(m8, 1))};
      const __m512i cc[2] = {c0, c1};
      __m512 scale[2];
      __m512i S[2], em[2];
      __mmask16 bad[2], keep[2];
      for (int v = 0; v < 2; ++v) {
        const __m512i E = _mm512_and_si512(_mm512_srli_epi32(cc[v], 23), vFF);
        const __mmask16 cnz = _mm512_test_epi32_mask(cc[v], vAbs);
        const __m512i ce = _mm512_mask_max_epi32(vNone, cnz, _mm512_sub_epi32(E, v127), vEmin);
        const __m512i pv = _mm512_mask_mov_epi32(vNone, _mm512_cmpgt_epi32_mask(pe[v], vLow), pe[v]);
        __m512i e = _mm512_max_epi32(pv, ce);
        keep[v] = _mm512_cmpneq_epi32_mask(e, vNone);  // some product or c is nonzero
        e = _mm512_max_epi32(e, vFloor);
        const __m512i se = _mm512_sub_epi32(vF127, e);
        bad[v] = _mm512_cmpgt_epu32_mask(_mm512_sub_epi32(se, v1), v253) |
                 _mm512_cmpeq_epi32_mask(E, vFF);
        bad[v] &= keep[v];
        scale[v] = _mm512_castsi512_ps(_mm512_slli_epi32(se, 23));
        S[v] = _mm512_cvttps_epi32(_mm512_mul_ps(_mm512_castsi512_ps(cc[v]), scale[v]));
        em[v] = e;
      }
      for (int g0 = 0; g0 < L; g0 += gmax) {
        const int g1 = std::min(L, g0 + gmax);
        __m512i T0 = vZero, T1 = vZero;
        for (int k = g0; k < g1; ++k) {
          const __m512 a = _mm512_set1_ps(av[k0 + k]);
          const float* b = bvp + (k0 + k) * kW;
          T0 = _mm512_add_epi32(T0, _mm512_cvttps_epi32(_mm512_mul_ps(_mm512_mul_ps(a, _mm512_load_ps(b)), scale[0])));
          T1 = _mm512_add_epi32(T1, _mm512_cvttps_epi32(_mm512_mul_ps(_mm512_mul_ps(a, _mm512_load_ps(b + 16)), scale[1])));
          asm volatile("" : "+v"(T0), "+v"(T1));
        }
        const __m512i T[2] = {T0, T1};
        for (int v = 0; v < 2; ++v) {
          const __m512i r = _mm512_add_epi32(S[v], T[v]);
          // sign of (r ^ S) & (r ^ T): signed overflow of the addition
          const __m512i ovf = _mm512_ternarylogic_epi32(r, S[v], T[v], 0x18);
          bad[v] |= _mm512_movepi32_mask(ovf);
          S[v] = r;
        }
      }
      __m512i res[2];
      for (int v = 0; v < 2; ++v) {
        __m512i fs = _mm512_and_si512(
            _mm512_castps_si512(_mm512_cvt_roundepi32_ps(S[v], _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC)), vRmask);
        if (half)  // fp16: round to odd at 24 bits (sticky in the last bit), RNE to fp16 below
          fs = _mm512_mask_or_epi32(fs, _mm512_cmpneq_epi32_mask(_mm512_cvttps_epi32(_mm512_castsi512_ps(fs)), S[v]),
                                    fs, v1);
        const __m512i d = _mm512_sub_epi32(em[v], vF);
        const __m512i ne = _mm512_add_epi32(_mm512_and_si512(_mm512_srli_epi32(fs, 23), vFF), d);
        const __mmask16 nz = _mm512_test_epi32_mask(S[v], S[v]) & keep[v];
        bad[v] |= nz & _mm512_cmpgt_epu32_mask(_mm512_sub_epi32(ne, v1), v253);
        res[v] = _mm512_maskz_add_epi32(nz, fs, _mm512_slli_epi32(d, 23));
        if (half)
          res[v] = _mm512_castps_si512(_mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_castsi512_ps(res[v]), _MM_FROUND_TO_NEAREST_INT)));
      }
      const uint32_t badmask = (uint32_t(bad[0]) | (uint32_t(bad[1]) << 16)) & okmask;
      if (badmask) {  // rare: the core finishes these lanes' chunk exactly
        alignas(64) uint32_t o[kW], n[kW];
        _mm512_store_si512(o, c0); _mm512_store_si512(o + 16, c1);
        _mm512_store_si512(n, res[0]); _mm512_store_si512(n + 16, res[1]);
        for (uint32_t m = badmask; m; m &= m - 1) {
          const int l = __builtin_ctz(m);
          n[l] = fb.chunk(i, p * kW + l, k0, o[l]);
        }
        res[0] = _mm512_load_si512(n); res[1] = _mm512_load_si512(n + 16);
      }
      c0 = res[0]; c1 = res[1];
    }
    _mm512_storeu_si512(ap, c0); _mm512_storeu_si512(ap + 16, c1);
  }
}
// TR-FDPA / GTR-FDPA (seed 003 Algorithms 10-11, AMD CDNA3) with AVX-512.  The products'
// truncated sums T (per parity for GTR) are the int32 terms of the T-FDPA kernel, at the
// products' own emax; the alignment with c (round down or toward zero) and the final RNE
// rounding run in fp64 lanes, where every intermediate (|S| < 2^50) is an exact integer.
MMA_AVX512 __attribute__((always_inline)) inline __m512d pow2_pd(__m256i k) {
  return _mm512_castsi512_pd(_mm512_slli_epi64(_mm512_add_epi64(_mm512_cvtepi32_epi64(k),
                                                                _mm512_set1_epi64(1023)), 52));
}

MMA_AVX512 void tr_panel_avx512(const Params& P, const Planes& pl, const Fallback& fb,
                                int64_t i0, int64_t i1, int64_t p, int64_t kc0, int64_t kc1,
                                uint32_t* acc, int64_t ldacc) {
  const int L = P.L, F = P.F;
  const bool gtr = P.op == kGtrFdpa;
  const int nh = gtr ? 2 : 1;  // product sets: all k, or even / odd k
  const int64_t Kp = pl.Kp;
  const __m512i vF = _mm512_set1_epi32(F), vNone = _mm512_set1_epi32(kNone);
  const __m512i vFloor = _mm512_set1_epi32(std::max(P.emax_floor, kNone + 1));
  const __m512i vEmin = _mm512_set1_epi32(-126), v127 = _mm512_set1_epi32(127);
  const __m512i vF127 = _mm512_set1_epi32(F + 127), v1 = _mm512_set1_epi32(1);
  const __m512i vFF = _mm512_set1_epi32(0xFF), vAbs = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512i v253 = _mm512_set1_epi32(253), vLow = _mm512_set1_epi32(-65);
  const __m512i vZero = _mm512_setzero_si512(), vM80 = _mm512_set1_epi32(-80);
  const bool rd = P.align_rd;  // round_dir: toward minus infinity, else toward zero
  auto rnd = [rd](__m512d x) MMA_AVX512 {
    return rd ? _mm512_roundscale_pd(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)
              : _mm512_roundscale_pd(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  };
  uint32_t okmask = 0;
  for (int l = 0; l < kW; ++l) okmask |= uint32_t(pl.col_ok[size_t(p * kW + l)]) << l;
  const float* bvp = pl.bv.data() + p * Kp * kW;
  const int8_t* bep = pl.be.data() + p * Kp * kW;
  for (int64_t i = i0; i < i1; ++i) {
    if (!pl.row_ok[size_t(i)] || okmask == 0) continue;
    const float* av = pl.av.data() + i * Kp;
    const int8_t* ae = pl.ae.data() + i * Kp;
    uint32_t* ap = acc + (i - i0) * ldacc + p * kW;
    __m512i c[2] = {_mm512_loadu_si512(ap), _mm512_loadu_si512(ap + 16)};
    for (int64_t k0 = kc0; k0 < kc1; k0 += L) {
      __m512i eh[2][2], T[2][2];  // [set][vector]: product emax and truncated sum
      __mmask16 bad[2] = {0, 0};
      for (int h = 0; h < nh; ++h) {
        __m256i m8 = _mm256_set1_epi8(-128);
        for (int k = h; k < L; k += nh)
          m8 = _mm256_max_epi8(m8, _mm256_adds_epi8(_mm256_set1_epi8(ae[k0 + k]),
                                                    _mm256_load_si256(reinterpret_cast<const __m256i*>(bep + (k0 + k) * kW))));
        const __m512i pe[2] = {_mm512_cvtepi8_epi32(_mm256_castsi256_si128(m8)),
                               _mm512_cvtepi8_epi32(_mm256_extracti128_si256(m8, 1))};
        __m512 scale[2];
        for (int v = 0; v < 2; ++v) {
          const __mmask16 any = _mm512_cmpgt_epi32_mask(pe[v], vLow);
          const __m512i e = _mm512_max_epi32(_mm512_mask_mov_epi32(vNone, any, pe[v]), vFloor);
          const __m512i se = _mm512_sub_epi32(vF127, e);
          // lanes without products keep a harmless scale: their terms are 0 * scale = 0
          const __mmask16 outr = _mm512_cmpgt_epu32_mask(_mm512_sub_epi32(se, v1), v253);
          bad[v] |= outr & any;
          scale[v] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_mask_mov_epi32(se, outr, v127), 23));
          eh[h][v] = e;
        }
        __m512i T0 = vZero, T1 = vZero;
        for (int k = h; k < L; k += nh) {
          const __m512 a = _mm512_set1_ps(av[k0 + k]);
          const float* b = bvp + (k0 + k) * kW;
          T0 = _mm512_add_epi32(T0, _mm512_cvttps_epi32(_mm512_mul_ps(_mm512_mul_ps(a, _mm512_load_ps(b)), scale[0])));
          T1 = _mm512_add_epi32(T1, _mm512_cvttps_epi32(_mm512_mul_ps(_mm512_mul_ps(a, _mm512_load_ps(b + 16)), scale[1])));
          asm volatile("" : "+v"(T0), "+v"(T1));
        }
        T[h][0] = T0;
        T[h][1] = T1;
      }
      __m512i res[2];
      for (int v = 0; v < 2; ++v) {
        const __m512i E8 = _mm512_and_si512(_mm512_srli_epi32(c[v], 23), vFF);
        const __mmask16 cnz = _mm512_test_epi32_mask(c[v], vAbs);
        const __m512i ce = _mm512_mask_max_epi32(vNone, cnz, _mm512_sub_epi32(E8, v127), vEmin);
        bad[v] |= _mm512_cmpeq_epi32_mask(E8, vFF);
        const __m512i em = gtr ? _mm512_max_epi32(eh[0][v], eh[1][v]) : eh[0][v];
        const __m512i E = _mm512_max_epi32(em, ce);
        // exponents of the fp64 scalings of T (clamped: |T| < 2^32, so 2^-80 already rounds right)
        const __m512i sTp = _mm512_max_epi32(_mm512_add_epi32(_mm512_sub_epi32(em, E), _mm512_set1_epi32(P.F2 - F)), vM80);
        // c * 2^(F - E) < 2^(F + 1) needs no clamp; the bound only keeps E = kNone lanes finite
        const __m512i sC = _mm512_min_epi32(_mm512_sub_epi32(vF, E), _mm512_set1_epi32(400));
        const __m512i sE0 = gtr ? _mm512_max_epi32(_mm512_sub_epi32(eh[0][v], em), vM80) : vZero;
        const __m512i sE1 = gtr ? _mm512_max_epi32(_mm512_sub_epi32(eh[1][v], em), vM80) : vZero;
        // GTR: c far below E is dropped (special_trunc of tr_finish)
        const __mmask16 cdrop = gtr ? _mm512_cmplt_epi32_mask(ce, _mm512_sub_epi32(E, _mm512_set1_epi32(F + 1)))
                                    : __mmask16(0);
        const __m512i d = _mm512_sub_epi32(E, _mm512_set1_epi32(P.F2));
        __m256i outh[2];
        __mmask8 badh[2];
        for (int q = 0; q < 2; ++q) {  // two halves of 8 fp64 lanes
#define MMA_HALF(x) (q ? _mm512_extracti64x4_epi64(x, 1) : _mm512_castsi512_si256(x))
          __m512d Td;
          if (gtr) {
            Td = _mm512_add_pd(rnd(_mm512_mul_pd(_mm512_cvtepi32_pd(MMA_HALF(T[0][v])), pow2_pd(MMA_HALF(sE0)))),
                               rnd(_mm512_mul_pd(_mm512_cvtepi32_pd(MMA_HALF(T[1][v])), pow2_pd(MMA_HALF(sE1)))));
          } else {
            Td = _mm512_cvtepi32_pd(MMA_HALF(T[0][v]));
          }
          const __m512d Tp = rnd(_mm512_mul_pd(Td, pow2_pd(MMA_HALF(sTp))));
          const __m512d cd = _mm512_cvtps_pd(_mm256_castsi256_ps(MMA_HALF(c[v])));
          __m512d cp = rnd(_mm512_mul_pd(cd, pow2_pd(MMA_HALF(sC))));
          cp = _mm512_maskz_mov_pd(__mmask8(~(cdrop >> (8 * q))), cp);
          const __m512d S = _mm512_fmadd_pd(cp, _mm512_set1_pd(double(1 << (P.F2 - F))), Tp);
          const __m256i fs = _mm256_castps_si256(_mm512_cvt_roundpd_ps(S, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
          const __m256i dh = MMA_HALF(d);
          const __m256i ne = _mm256_add_epi32(_mm256_and_si256(_mm256_srli_epi32(fs, 23), _mm256_set1_epi32(0xFF)), dh);
          const __mmask8 nz = _mm512_cmpneq_pd_mask(S, _mm512_setzero_pd());
          badh[q] = nz & _mm256_cmpgt_epu32_mask(_mm256_sub_epi32(ne, _mm256_set1_epi32(1)), _mm256_set1_epi32(253));
          outh[q] = _mm256_maskz_add_epi32(nz, fs, _mm256_slli_epi32(dh, 23));
#undef MMA_HALF
        }
        bad[v] |= __mmask16(badh[0] | (uint32_t(badh[1]) << 8));
        res[v] = _mm512_inserti64x4(_mm512_castsi256_si512(outh[0]), outh[1], 1);
      }
      const uint32_t badmask = (uint32_t(bad[0]) | (uint32_t(bad[1]) << 16)) & okmask;
      if (badmask) {
        alignas(64) uint32_t o[kW], n[kW];
        _mm512_store_si512(o, c[0]); _mm512_store_si512(o + 16, c[1]);
        _mm512_store_si512(n, res[0]); _mm512_store_si512(n + 16, res[1]);
        for (uint32_t m = badmask; m; m &= m - 1) {
          const int l = __builtin_ctz(m);
          n[l] = fb.chunk(i, p * kW + l, k0, o[l]);
        }
        res[0] = _mm512_load_si512(n); res[1] = _mm512_load_si512(n + 16);
      }
      c[0] = res[0];
      c[1] = res[1];
    }
    _mm512_storeu_si512(ap, c[0]); _mm512_storeu_si512(ap + 16, c[1]);
  }
}
// E-FDPA (seed 003 Algorithm 6, AMD CDNA1) with AVX-512: c + the chunk's products summed in
// fp64 lanes with TwoSum.  Products of fp16/bf16 values are exact in fp64; when every TwoSum
// error is zero the fp64 sum is the exact sum, and one RNE conversion to fp32 is the core's
// single rounding.  Lanes with an inexact step, or a NaN/Inf accumulator, go to the core.
MMA_AVX512 void efdpa_panel_avx512(const Params& P, const Planes& pl, const Fallback& fb,
                                   int64_t i0, int64_t i1, int64_t p, int64_t kc0, int64_t kc1,
                                   uint32_t* acc, int64_t ldacc) {
  const int L = P.L;
  const int64_t Kp = pl.Kp;
  uint32_t okmask = 0;
  for (int l = 0; l < kW; ++l) okmask |= uint32_t(pl.col_ok[size_t(p * kW + l)]) << l;
  const float* bvp = pl.bv.data() + p * Kp * kW;
  const __m256i vExp = _mm256_set1_epi32(0x7F800000);
  for (int64_t i = i0; i < i1; ++i) {
    if (!pl.row_ok[size_t(i)] || okmask == 0) continue;
    const float* av = pl.av.data() + i * Kp;
    uint32_t* ap = acc + (i - i0) * ldacc + p * kW;
    __m256i c[4];
    for (int v = 0; v < 4; ++v) c[v] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ap + 8 * v));
    for (int64_t k0 = kc0; k0 < kc1; k0 += L) {
      __m512d s[4];
      __mmask8 err[4];
      for (int v = 0; v < 4; ++v) {
        s[v] = _mm512_cvtps_pd(_mm256_castsi256_ps(c[v]));
        err[v] = __mmask8(_mm256_cmpeq_epi32_mask(_mm256_and_si256(c[v], vExp), vExp));  // NaN/Inf
      }
      for (int k = 0; k < L; ++k) {
        const __m512d a = _mm512_set1_pd(double(av[k0 + k]));
        const float* b = bvp + (k0 + k) * kW;
        for (int v = 0; v < 4; ++v) {
          const __m512d x = _mm512_mul_pd(a, _mm512_cvtps_pd(_mm256_load_ps(b + 8 * v)));
          const __m512d t = _mm512_add_pd(s[v], x);  // TwoSum(s, x): e = s + x - t exactly
          const __m512d bb = _mm512_sub_pd(t, s[v]);
          const __m512d e = _mm512_add_pd(_mm512_sub_pd(s[v], _mm512_sub_pd(t, bb)), _mm512_sub_pd(x, bb));
          err[v] |= _mm512_cmpneq_pd_mask(e, _mm512_setzero_pd());
          s[v] = t;
        }
      }
      uint32_t badmask = 0;
      __m256i res[4];
      for (int v = 0; v < 4; ++v) {
        const __m256 f = _mm512_cvt_roundpd_ps(s[v], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        // an exact zero sum is +0 (WideAcc::round), whatever the signs of the zeros
        res[v] = _mm256_maskz_mov_epi32(_mm512_cmpneq_pd_mask(s[v], _mm512_setzero_pd()), _mm256_castps_si256(f));
        badmask |= uint32_t(err[v]) << (8 * v);
      }
      badmask &= okmask;
      if (badmask) {
        alignas(32) uint32_t o[kW], n[kW];
        for (int v = 0; v < 4; ++v) {
          _mm256_store_si256(reinterpret_cast<__m256i*>(o + 8 * v), c[v]);
          _mm256_store_si256(reinterpret_cast<__m256i*>(n + 8 * v), res[v]);
        }
        for (uint32_t m = badmask; m; m &= m - 1) {
          const int l = __builtin_ctz(m);
          n[l] = fb.chunk(i, p * kW + l, k0, o[l]);
        }
        for (int v = 0; v < 4; ++v) res[v] = _mm256_load_si256(reinterpret_cast<const __m256i*>(n + 8 * v));
      }
      for (int v = 0; v < 4; ++v) c[v] = res[v];
    }
    for (int v = 0; v < 4; ++v) _mm256_storeu_si256(reinterpret_cast<__m256i*>(ap + 8 * v), c[v]);
  }
}
// GST-FDPA (seed 003 Algorithm 9, Blackwell kind::mxf4 / mxf4nvf4) with AVX-512.  A group's
// dot (G fp4 products) is exact in fp32; times the two scale values it is exact in fp64,
// and so are its truncated term at emax (< 2^(F + 12)) and the sum S (< 2^50): the fp64
// lanes carry the core's int64 arithmetic.  RZ to fp32 by an embedded-rounding conversion.
MMA_AVX512 void gst_panel_avx512(const Params& P, const Planes& pl, const Fallback& fb,
                                 int64_t i0, int64_t i1, int64_t p, int64_t kc0, int64_t kc1,
                                 uint32_t* acc, int64_t ldacc) {
  constexpr int kMaxGroups = 16;
  const int L = P.L, G = P.G, F = P.F, ng = L / G;
  const int64_t Kp = pl.Kp, nblk = (pl.K + P.block - 1) / P.block;
  uint32_t okmask = 0;
  for (int l = 0; l < kW; ++l) okmask |= uint32_t(pl.col_ok[size_t(p * kW + l)]) << l;
  const float* bvp = pl.bv.data() + p * Kp * kW;
  const double* sbvp = pl.sbv.data() + p * nblk * kW;
  const int32_t* sbep = pl.sbe.data() + p * nblk * kW;
  const __m256i vNone = _mm256_set1_epi32(kNone), vFF = _mm256_set1_epi32(0xFF);
  const __m256i vFloor = _mm256_set1_epi32(std::max(P.emax_floor, kNone + 1));
  const __m256i vAbs = _mm256_set1_epi32(0x7FFFFFFF), v127 = _mm256_set1_epi32(127);
  const __m256i vEmin = _mm256_set1_epi32(-126), vF = _mm256_set1_epi32(F);
  for (int64_t i = i0; i < i1; ++i) {
    if (!pl.row_ok[size_t(i)] || okmask == 0) continue;
    const float* av = pl.av.data() + i * Kp;
    uint32_t* ap = acc + (i - i0) * ldacc + p * kW;
    for (int64_t k0 = kc0; k0 < kc1; k0 += L) {
      __m512 V[kMaxGroups][2];
      for (int g = 0; g < ng; ++g) {
        __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
        for (int k = g * G; k < (g + 1) * G; ++k) {  // exact: products and sums on a small grid
          const __m512 a = _mm512_set1_ps(av[k0 + k]);
          const float* b = bvp + (k0 + k) * kW;
          s0 = _mm512_fmadd_ps(a, _mm512_load_ps(b), s0);
          s1 = _mm512_fmadd_ps(a, _mm512_load_ps(b + 16), s1);
        }
        V[g][0] = s0;
        V[g][1] = s1;
      }
      uint32_t badmask = 0;
      alignas(32) uint32_t o[kW], n[kW];
      std::memcpy(o, ap, sizeof(o));
      for (int q = 0; q < 4; ++q) {  // 8 fp64 lanes at a time
        const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ap + 8 * q));
        const __m256i E8 = _mm256_and_si256(_mm256_srli_epi32(c, 23), vFF);
        const __mmask8 cnz = _mm256_test_epi32_mask(c, vAbs);
        __m256i emax = _mm256_mask_max_epi32(vNone, cnz, _mm256_sub_epi32(E8, v127), vEmin);
        __mmask8 bad = _mm256_cmpeq_epi32_mask(E8, vFF);
        __m512d val[kMaxGroups];
        for (int g = 0; g < ng; ++g) {
          // groups wholly in the K padding have V = 0; clamp their (absent) block index
          const int64_t kb = std::min<int64_t>((k0 + g * G) / P.block, nblk - 1);
          const __m256 vq = (q & 1) ? _mm512_extractf32x8_ps(V[g][q >> 1], 1) : _mm512_castps512_ps256(V[g][q >> 1]);
          val[g] = _mm512_mul_pd(_mm512_mul_pd(_mm512_cvtps_pd(vq), _mm512_set1_pd(pl.sav[size_t(i * nblk + kb)])),
                                 _mm512_loadu_pd(sbvp + kb * kW + 8 * q));
          const __mmask8 nz = _mm512_cmpneq_pd_mask(val[g], _mm512_setzero_pd());
          const __m256i eg = _mm256_add_epi32(_mm256_set1_epi32(pl.sae[size_t(i * nblk + kb)]),
                                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sbep + kb * kW + 8 * q)));
          emax = _mm256_mask_max_epi32(emax, nz, emax, eg);
        }
        const __mmask8 keep = _mm256_cmpneq_epi32_mask(emax, vNone);
        emax = _mm256_max_epi32(emax, vFloor);
        const __m512d sc = pow2_pd(_mm256_min_epi32(_mm256_sub_epi32(vF, emax), _mm256_set1_epi32(1000)));
        const __m512d cd = _mm512_cvtps_pd(_mm256_castsi256_ps(c));
        __m512d S = _mm512_roundscale_pd(_mm512_mul_pd(cd, sc), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        for (int g = 0; g < ng; ++g)
          S = _mm512_add_pd(S, _mm512_roundscale_pd(_mm512_mul_pd(val[g], sc), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC));
        const __m256i fs = _mm256_castps_si256(_mm512_cvt_roundpd_ps(S, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC));
        const __m256i d = _mm256_sub_epi32(emax, vF);
        const __m256i ne = _mm256_add_epi32(_mm256_and_si256(_mm256_srli_epi32(fs, 23), vFF), d);
        const __mmask8 nz = _mm512_cmpneq_pd_mask(S, _mm512_setzero_pd()) & keep;
        bad |= nz & _mm256_cmpgt_epu32_mask(_mm256_sub_epi32(ne, _mm256_set1_epi32(1)), _mm256_set1_epi32(253));
        bad &= keep | _mm256_cmpeq_epi32_mask(E8, vFF);
        _mm256_store_si256(reinterpret_cast<__m256i*>(n + 8 * q),
                           _mm256_maskz_add_epi32(nz, fs, _mm256_slli_epi32(d, 23)));
        badmask |= uint32_t(bad) << (8 * q);
      }
      badmask &= okmask;
      for (uint32_t m = badmask; m; m &= m - 1) {
        const int l = __builtin_ctz(m);
        n[l] = fb.chunk(i, p * kW + l, k0, o[l]);
      }
      std::memcpy(ap, n, sizeof(n));
    }
  }
}
#endif

struct RzGuard {  // FpEnvGuard plus round-toward-zero for AVX2's cvtdq2ps (not for E-FDPA,
  FpEnvGuard base;  // whose TwoSum needs round to nearest)
  explicit RzGuard(bool rz) {
#ifdef MMA_FAST_X86
    if (rz) _mm_setcsr(_mm_getcsr() | 0x6000u);
#else
    (void)rz;
#endif
  }
};

}  // namespace

// ---- FdpaPanels ---------------------------------------------------------------------------
enum PanelKind : int { kPanelNone = 0, kPanelAvx2, kPanelAvx512, kPanelTr, kPanelE, kPanelGst };

bool FdpaPanels::prepare(const Params& P, const Decoded& A, const Decoded& B, const Dec* SA,
                         const Dec* SB, const uint8_t* fsa, const uint8_t* fsb, int64_t nblk,
                         int64_t M, int64_t N, int64_t K) {
  kind_ = kPanelNone;
#ifdef MMA_FAST_X86
  const Isa isa = cpu_isa();
  const FastKind fk = fast_eligible(P);
  if (isa == Isa::kScalar) return false;
  if (fk == FastKind::kFdpa) kind_ = isa == Isa::kAvx512 ? kPanelAvx512 : kPanelAvx2;
  else if (isa != Isa::kAvx512) return false;  // the other kernels are AVX-512 only
  else if (fk == FastKind::kTr) kind_ = kPanelTr;
  else if (fk == FastKind::kE) kind_ = kPanelE;
  else if (fk == FastKind::kGst) kind_ = kPanelGst;
  else return false;
  thread_local Planes pl;  // reused between calls
  build_planes(P, A, B, SA, SB, fsa, fsb, nblk, M, N, K, pl);
  P_ = &P; pl_ = &pl; A_ = &A; B_ = &B; SA_ = SA; SB_ = SB; nblk_ = nblk;
  return true;
#else
  (void)P; (void)A; (void)B; (void)SA; (void)SB; (void)fsa; (void)fsb; (void)nblk;
  (void)M; (void)N; (void)K;
  return false;
#endif
}

int64_t FdpaPanels::width() const { return pl_->NP * kW; }
bool FdpaPanels::row_ok(int64_t i) const { return pl_->row_ok[size_t(i)] != 0; }
bool FdpaPanels::col_ok(int64_t j) const { return pl_->col_ok[size_t(j)] != 0; }
bool FdpaPanels::ok(int64_t i, int64_t j) const {
  return pl_->row_ok[size_t(i)] && pl_->col_ok[size_t(j)];
}

void FdpaPanels::run(int64_t i0, int64_t i1, int64_t k0, int64_t k1, uint32_t* acc,
                     int64_t ld) const {
#ifdef MMA_FAST_X86
  if (k1 <= k0) return;  // an empty range leaves the accumulators as they are
  const Params& P = *P_;
  const Planes& pl = *pl_;
  const auto panel = kind_ == kPanelGst   ? gst_panel_avx512
                     : kind_ == kPanelE   ? efdpa_panel_avx512
                     : kind_ == kPanelTr  ? tr_panel_avx512
                     : kind_ == kPanelAvx512 ? fdpa_panel_avx512 : fdpa_panel_avx2;
  const Fallback fb{&P, out_fmt(P.rho), A_, B_, SA_, SB_, nblk_, pl.K};
  // the planes are zero-padded to Kp: a range ending at K ends at Kp
  const int64_t kend = std::min(pl.Kp, (k1 + P.L - 1) / P.L * P.L);
  // K blocks of about 128 keep a panel slice in L1 while the row block sweeps it
  const int64_t KB = std::max<int64_t>(1, 128 / P.L) * P.L;
  RzGuard rz(kind_ != kPanelE);
  for (int64_t kb = k0; kb < kend; kb += KB)
    for (int64_t p = 0; p < pl.NP; ++p)
      panel(P, pl, fb, i0, i1, p, kb, std::min(kend, kb + KB), acc, ld);
#else
  (void)i0; (void)i1; (void)k0; (void)k1; (void)acc; (void)ld;
#endif
}

bool fast_fdpa_batch(const Params& P, const Decoded& A, const Decoded& B, const Dec* SA,
                     const Dec* SB, const uint8_t* fsa, const uint8_t* fsb, int64_t nblk,
                     int64_t M, int64_t N, int64_t K, const View3& vc, int64_t bi, uint8_t* out,
                     int oes) {
  if (oes != (P.rho == kRneFp16 ? 2 : 4)) return false;
  FdpaPanels fp;
  if (!fp.prepare(P, A, B, SA, SB, fsa, fsb, nblk, M, N, K)) return false;
  const int64_t Np = fp.width();
  const int64_t nrb = (M + kRowBlock - 1) / kRowBlock;
  at::parallel_for(0, nrb, 1, [&](int64_t lo, int64_t hi) {
    thread_local std::vector<uint32_t> accv;
    accv.resize(size_t(kRowBlock * Np));
    uint32_t* acc = accv.data();
    for (int64_t rb = lo; rb < hi && !interrupted(); ++rb) {
      const int64_t i0 = rb * kRowBlock, i1 = std::min(M, i0 + kRowBlock);
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = 0; j < Np; ++j)
          acc[(i - i0) * Np + j] = (P.epilogue || j >= N) ? 0u
                                   : oes == 2 ? f32_bits_of_f16(uint32_t(vc.at(bi, i, j)))
                                              : uint32_t(vc.at(bi, i, j));
      fp.run(i0, i1, 0, K, acc, Np);
      FpEnvGuard env;  // epilogue additions round to nearest
      for (int64_t i = i0; i < i1; ++i) {
        uint8_t* orow = out + (bi * M + i) * N * oes;
        auto put = [&](int64_t j, uint64_t r) {
          if (oes == 2) reinterpret_cast<uint16_t*>(orow)[j] = uint16_t(r);
          else reinterpret_cast<uint32_t*>(orow)[j] = uint32_t(r);
        };
        for (int64_t j = 0; j < N; ++j) {
          const uint64_t cb = vc.at(bi, i, j);
          if (fp.ok(i, j)) {
            const uint32_t a32 = acc[(i - i0) * Np + j];
            const uint64_t r = oes == 2 ? f16_bits_of_f32(a32) : a32;
            put(j, P.epilogue ? epilogue_add(P, r, cb) : r);
          } else {  // NaN / Inf / out-of-window operands: the whole chain in the core
            const uint8_t fl = A.row_flags[size_t(i)] | B.row_flags[size_t(j)] |
                               (SA ? fsa[i] | fsb[j] : 0);
            put(j, dot_fused(P, A.row(i, K), B.row(j, K), int(K), cb, SA ? SA + i * nblk : nullptr,
                             SB ? SB + j * nblk : nullptr, fl));
          }
        }
      }
      check_interrupt_main();
    }
  });
  return true;
}

}  // namespace mma
