// NVIDIA's float32 math as torch 2.13's CUDA 13.0 kernels run it, one element at a time: the
// MUFU.EX2 / RCP / RSQ bit models and ATen's expf, logf, tanhf, erff, rsqrtf, sigmoid, SiLU and
// GELU (both forms) built from them and from IEEE operations.  The fast path of
// torch_mma_emu.aten_cuda (csrc/cpu/gpu_math_cpu.cpp runs it over tensors); the NumPy models
// (torch_mma_emu/gpu_math/mufu.py, torch_mma_emu/aten_cuda/elementwise.py) are the slow
// reference it is tested against bit for bit (tests/test_gpu_math_fast.py).
//
// The MUFU coefficient tables are not repeated here: the caller passes them (MufuTables, from
// torch_mma_emu/gpu_math/tables.py, the one table of that fact).  Host code runs under the
// CPU kernel's FpEnvGuard (round to nearest, no FTZ/DAZ) and -ffp-contract=off, so every
// float operation below is one IEEE operation, as on the GPU.  NaN results are NVIDIA's
// canonical NaN 0x7fffffff, as in the NumPy models.
#pragma once
#include <cmath>
#include <cstring>

#include "common.h"

namespace mma {
namespace gm {

// The coefficient rows (c0, c1, c2 per row, int64) and biases of the three MUFU tables.
struct MufuTables {
  const int64_t* ex2;  // 64 rows
  const int64_t* rcp;  // 128 rows
  const int64_t* rsq;  // 128 rows
  uint64_t ex2_bias, rcp_bias, rsq_bias;
  // squarer_dropped(x) for x < 2^17 (every index the three units use): host code needs it
  const uint32_t* dropped = nullptr;
};

constexpr uint32_t kMask23 = (1u << 23) - 1;
constexpr uint32_t kCanonNan = 0x7FFFFFFFu;

MMA_HD bool isnan_f(float x) { return (bits_of(x) & 0x7FFFFFFFu) > 0x7F800000u; }
MMA_HD float canon(float x) { return isnan_f(x) ? f32_of(kCanonNan) : x; }
MMA_HD float cf(uint32_t b) { return f32_of(b); }

// IEEE float32 operations rounded to nearest even (canonical NaN).
MMA_HD float add(float a, float b) { return canon(MMA_DEV_OR_HOST(__fadd_rn(a, b), a + b)); }
MMA_HD float sub(float a, float b) { return canon(MMA_DEV_OR_HOST(__fsub_rn(a, b), a - b)); }
MMA_HD float mul(float a, float b) { return canon(MMA_DEV_OR_HOST(__fmul_rn(a, b), a * b)); }
MMA_HD float div(float a, float b) { return canon(MMA_DEV_OR_HOST(__fdiv_rn(a, b), a / b)); }
#if defined(__GNUC__)   // the builtin: inlined also where the caller has other flags
#define MMA_GM_HOST_FMA(a, b, c) __builtin_fmaf(a, b, c)
#else
#define MMA_GM_HOST_FMA(a, b, c) std::fma(a, b, c)
#endif
MMA_HD float fma(float a, float b, float c) {
  return canon(MMA_DEV_OR_HOST(__fmaf_rn(a, b, c), MMA_GM_HOST_FMA(a, b, c)));
}

// expf's fma.rm.f32(t, 252, 0x4B400001) for t in [0, 1] (after its cvt.sat): the exact value
// lies in [2^23 + 1, 2^23 + 253], where the floats are the integers, so rounding toward -inf
// is floor: 0x4B400001 + floor(252 t) as bits.  t = m 2^(E - 150) (m < 2^24), so
// floor(252 t) = (252 m) >> (150 - E) in 32-bit integers (252 m < 2^32): exact, no rounding.
MMA_HD float expf_fma_rm(float t) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rd(t, 252.0f, f32_of(0x4B400001u));
#else
  const uint32_t b = bits_of(t), E = (b >> 23) & 0xFF;     // (masks, not branches: the CPU
  const uint32_t m = (b & 0x7FFFFFu) | (uint32_t(E != 0) << 23);   // loops vectorise)
  const uint32_t sh = 150 - E;                                // E <= 127: sh >= 23
  const uint32_t k = ((252u * m) >> (sh & 31)) & (0u - uint32_t(sh < 32));
  return f32_of(0x4B400001u + k);
#endif
}

MMA_HD float copysign_bits(float sign_of, float mag) {
  return f32_of((bits_of(mag) & 0x7FFFFFFFu) | (bits_of(sign_of) & 0x80000000u));
}

// The partial-product bits the hardware squarer drops (mufu.py _dropped): the diagonal bits
// x_k 2^(2k) and the doubled cross terms x_i x_j 2^(i+j+1) (i < j) in the 19 lowest columns.
MMA_HD uint64_t squarer_dropped(uint64_t x) {
  const uint64_t low = (uint64_t(1) << 19) - 1;
  uint64_t v = x & 0x3FF;                       // bit k of x to column 2k (k < 10)
  v = (v | (v << 8)) & 0x00FF00FFull;
  v = (v | (v << 4)) & 0x0F0F0F0Full;
  v = (v | (v << 2)) & 0x33333333ull;
  v = (v | (v << 1)) & 0x55555555ull;
  uint64_t err = v & low;
  for (int i = 0; i < 9; ++i) {                 // row i: x_i * (bits of x above i), shifted
    const uint64_t row = (x << (i + 1)) & ~((uint64_t(1) << (2 * i + 2)) - 1) & 0xFFFFFFFFull;
    err += (0 - ((x >> i) & 1)) & (row & low);
  }
  return err;
}

constexpr uint64_t kDroppedSize = uint64_t(1) << 17;

// The squarer of x < 2^17: the exact square less the dropped bits (device code computes them;
// host code reads T.dropped, which the CPU kernel always passes: a lookup the loops vectorise).
MMA_HD uint64_t approx_square(uint32_t x, const MufuTables& T) {
#if defined(__CUDA_ARCH__)
  return uint64_t(x) * x - squarer_dropped(x);
#else
  return uint64_t(x) * x - T.dropped[x];
#endif
}

// MUFU.EX2 = ex2.approx.ftz.f32 (mufu.py ex2): the fraction as 23 truncated fixed-point bits
// (negative x: inverted, one more off the integer part) picks the row by its top 6 bits.
// Written without branches (selects only), so the CPU loops vectorise.
MMA_HD float ex2_ftz(float x, const MufuTables& T) {
  const uint32_t b = bits_of(x);
  const bool nan = (b & 0x7FFFFFFFu) > 0x7F800000u;
  const uint32_t neg = b >> 31;
  const uint32_t E = (b >> 23) & 0xFF;
  const bool big = E >= 134;                                // |x| >= 128 or Inf
  const uint32_t m = (b & kMask23) | (E != 0 ? (1u << 23) : 0u);
  const uint32_t left = E >= 127 ? (E - 127) & 7 : 0;
  const uint32_t right = E < 127 ? (127 - E < 31 ? 127 - E : 31) : 0;
  const uint32_t fixed = (m << left) >> right;              // floor(|x| 2^23), |x| < 128
  const int32_t ip = int32_t(fixed >> 23);
  uint32_t r = fixed & kMask23;
  const uint32_t inv = neg & uint32_t(r != 0);
  r = inv ? kMask23 - r : r;
  const int32_t n = (neg ? -ip : ip) - int32_t(inv);
  const uint32_t xh = r >> 17, xl = r & ((1u << 17) - 1);
  const uint64_t c0 = uint64_t(T.ex2[3 * xh]), c1 = uint32_t(T.ex2[3 * xh + 1]),
                 c2 = uint32_t(T.ex2[3 * xh + 2]);
  const uint64_t s = (c0 << 32) + ((c1 * uint64_t(xl)) << 19) + c2 * approx_square(xl, T) +
                     (T.ex2_bias >> 30);
  const uint32_t frac = uint32_t(s >> 34) & kMask23;
  const int32_t e = n + 127;
  uint32_t res = e >= 1 ? ((uint32_t(e < 254 ? e : 254) << 23) | frac) : 0u;
  res = big ? (neg ? 0u : 0x7F800000u) : res;
  return f32_of(nan ? kCanonNan : res);
}

// MUFU.RCP = rcp.approx.ftz.f32 (mufu.py rcp); the special inputs selected at the end
// (no branches: the CPU loops vectorise).
MMA_HD float rcp_ftz(float x, const MufuTables& T) {
  const uint32_t b = bits_of(x);
  const uint32_t sign = b & 0x80000000u;
  const int32_t e = int32_t((b >> 23) & 0xFF);
  const uint32_t m = b & kMask23;
  const uint32_t xh = m >> 16, xl = m & 0xFFFF;
  const uint64_t c0 = uint64_t(T.rcp[3 * xh]), c1 = uint32_t(T.rcp[3 * xh + 1]),
                 c2 = uint32_t(T.rcp[3 * xh + 2]);
  uint64_t s = (c0 << 30) - ((c1 * uint64_t(xl)) << 17) + c2 * (approx_square(xl << 1, T) >> 2) +
               (T.rcp_bias >> 31);
  const bool small = (s >> 56) == 0;
  const int32_t rexp = small ? 126 : 127;
  s = small ? s << 1 : s;
  const uint32_t frac = uint32_t(s >> 33) & kMask23;
  const int32_t eo = rexp - (e - 127);
  uint32_t res = (eo >= 1 ? ((uint32_t(eo < 254 ? eo : 254) << 23) | frac) : 0u) | sign;
  res = e == 0 ? (sign | 0x7F800000u) : res;               // zero or subnormal (flushed)
  res = e == 255 ? sign : res;                              // Inf
  return f32_of((b & 0x7FFFFFFFu) > 0x7F800000u ? kCanonNan : res);
}

// MUFU.RSQ = rsqrt.approx.ftz.f32 (mufu.py rsqrt): odd exponents take the second half.
MMA_HD float rsqrt_ftz(float x, const MufuTables& T) {
  const uint32_t b = bits_of(x);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return cf(kCanonNan);
  const uint32_t sign = b & 0x80000000u;
  const int32_t e = int32_t((b >> 23) & 0xFF);
  if (e == 0) return f32_of(sign | 0x7F800000u);
  if (sign) return cf(kCanonNan);                           // negative, -Inf
  if (e == 255) return 0.0f;                                // +Inf
  const uint32_t m = b & kMask23;
  int32_t ub = e - 127;
  const bool odd = (ub & 1) != 0;
  if (odd) ub -= 1;
  const uint64_t idx = (m >> 17) + (odd ? 64 : 0), xl = m & ((1u << 17) - 1);
  const uint64_t c0 = uint64_t(T.rsq[3 * idx]), c1 = uint64_t(T.rsq[3 * idx + 1]),
                 c2 = uint64_t(T.rsq[3 * idx + 2]);
  const uint64_t s = (c0 << 31) - ((c1 * xl) << 17) + c2 * approx_square(xl, T) +
                     (T.rsq_bias >> 30);
  if (!odd && m == 0) return f32_of(uint32_t(127 - ub / 2) << 23);   // 1/sqrt(4^k) = 2^-k
  const uint32_t frac = uint32_t(((s << 1) >> 34) & kMask23);
  return f32_of((uint32_t(126 - ub / 2) << 23) | frac);
}

// rsqrt.approx.f32 (gpu_math "rsqrt.approx.f32"): |x| < 2^-126 scaled by 2^24, the result
// by 2^12.
MMA_HD float rsqrt_full(float x, const MufuTables& T) {
  const bool small = (bits_of(x) & 0x7FFFFFFFu) < 0x00800000u;
  const float r = rsqrt_ftz(small ? mul(x, 16777216.0f) : x, T);
  return small ? mul(r, 4096.0f) : r;
}

// ---- ATen's expressions (aten_cuda/elementwise.py) ----------------------------------------
// CUDA's expf up to its last product: ex2 of the reduced argument and 2^j.
MMA_HD void expf_parts(float x, const MufuTables& T, float& e, float& scale) {
  float t = fma(x, cf(0x3BBB989Du), 0.5f);                 // x log2(e) / 256 + 1/2
  // cvt.sat: NaN and t <= -0 to +0, above 1 to 1 (on the bits, without branches)
  const uint32_t tb = bits_of(t);
  const uint32_t low = uint32_t(tb >> 31) | uint32_t((tb & 0x7FFFFFFFu) > 0x7F800000u);
  t = f32_of((tb < 0x3F800000u ? tb : 0x3F800000u) & (low - 1u));
  const float j = expf_fma_rm(t);                           // fma.rm(t, 252, 0x4B400001)
  float r = fma(x, cf(0x3FB8AA3Bu), -add(j, cf(0xCB40007Fu)));
  r = fma(x, cf(0x32A57060u), r);
  scale = f32_of(bits_of(j) << 23);
  e = ex2_ftz(r, T);
}

MMA_HD float expf_(float x, const MufuTables& T) {
  float e, s;
  expf_parts(x, T, e, s);
  return mul(e, s);
}

MMA_HD float one_plus_exp_neg(float x, const MufuTables& T) {
  float e, s;
  expf_parts(-x, T, e, s);
  return fma(e, s, 1.0f);
}

MMA_HD float sigmoid(float x, const MufuTables& T) { return div(1.0f, one_plus_exp_neg(x, T)); }
MMA_HD float silu(float x, const MufuTables& T) { return div(x, one_plus_exp_neg(x, T)); }

MMA_HD float logf_(float x) {
  const bool small = x < cf(0x00800000u);
  const float x1 = small ? mul(x, cf(0x4B000000u)) : x;
  const float e0 = small ? cf(0xC1B80000u) : 0.0f;
  const uint32_t b = bits_of(x1);
  const uint32_t k = (b - 1059760811u) & 0xFF800000u;
  const float m = f32_of(b - k);
  const float ks = float(int32_t(k));                       // a multiple of 2^23: exact
  const float e = fma(ks, cf(0x34000000u), e0);
  const float f = add(m, -1.0f);
  constexpr uint32_t P[9] = {0xBE055027u, 0x3E1039F6u, 0xBDF8CDCCu, 0x3E0F2955u, 0xBE2AD8B9u,
                             0x3E4CED0Bu, 0xBE7FFF22u, 0x3EAAAA78u, 0xBF000000u};
  float p = fma(cf(P[0]), f, cf(P[1]));
  for (int i = 2; i < 9; ++i) p = fma(p, f, cf(P[i]));
  const float q = fma(mul(f, p), f, f);
  float r = fma(e, cf(0x3F317218u), q);
  if (b >= 0x7F800000u) r = fma(x1, cf(0x7F800000u), cf(0x7F800000u));   // NaN, Inf, x < 0
  return x1 == 0.0f ? cf(0xFF800000u) : r;
}

// tanhf and erff compute both branches and select, as the NumPy models do (no branches).
MMA_HD float tanhf_(float x, const MufuTables& T) {
  const float a = f32_of(bits_of(x) & 0x7FFFFFFFu);
  const float t = add(ex2_ftz(mul(a, cf(0x4038AA3Bu)), T), 1.0f);
  const float q = fma(rcp_ftz(t, T), -2.0f, 1.0f);
  const uint32_t one = 0u - uint32_t(a >= cf(0x41102CB4u));  // |x| >= 9.01: 1 (mask select)
  const float big = copysign_bits(x, f32_of((0x3F800000u & one) | (bits_of(q) & ~one)));
  const float x2 = mul(x, x);
  float p = fma(cf(0x3C80F082u), x2, cf(0xBD563CAEu));
  p = fma(p, x2, cf(0x3E085941u));
  p = fma(p, x2, cf(0xBEAAA9EDu));
  p = fma(p, x2, 0.0f);
  const float small = fma(p, x, x);
  return a >= cf(0x3F19999Au) ? big : small;               // |x| >= 0.6
}

MMA_HD float erff_(float x, const MufuTables& T) {
  constexpr uint32_t B[7] = {0x38EB4C3Au, 0xBAAE005Bu, 0x3C09919Fu, 0xBD24D99Au,
                             0x3E235519u, 0x3F69B4F9u, 0x3F210A14u};
  constexpr uint32_t S[7] = {0x38B1E96Au, 0xBA574D20u, 0x3BAAD5EAu, 0xBCDC1BE7u,
                             0x3DE718AFu, 0xBEC093ACu, 0x3E0375D3u};
  const float a = f32_of(bits_of(x) & 0x7FFFFFFFu);
  const bool big = a >= cf(0x3F8060FEu);
  const float t = big ? a : mul(x, x);
  float p = fma(cf(big ? B[0] : S[0]), t, cf(big ? B[1] : S[1]));
  for (int i = 2; i < 7; ++i) p = fma(p, t, cf(big ? B[i] : S[i]));
  const float y = big ? -a : x;
  const float r = fma(p, y, y);
  const float rb = copysign_bits(x, sub(1.0f, ex2_ftz(r, T)));
  return big ? rb : r;
}

MMA_HD float gelu(float x, const MufuTables& T) {
  const float e = erff_(mul(x, cf(0x3F3504F3u)), T);
  return mul(mul(x, 0.5f), add(e, 1.0f));
}

MMA_HD float gelu_tanh(float x, const MufuTables& T) {
  const float cube = mul(x, mul(x, x));
  const float inner = mul(fma(cube, cf(0x3D372713u), x), cf(0x3F4C422Au));
  return mul(mul(x, 0.5f), add(tanhf_(inner, T), 1.0f));
}

// The functions by code; names in this order (GM_OPS) are the Python side's.
#define MMA_GM_OPS(X)                                                                       \
  X(exp) X(log) X(tanh) X(erf) X(rsqrt) X(sigmoid) X(silu) X(gelu) X(gelu_tanh) X(ex2_ftz) \
  X(rcp_ftz) X(rsqrt_ftz)
enum Op : int {
#define MMA_GM_ENUM(n) k_##n,
  MMA_GM_OPS(MMA_GM_ENUM)
#undef MMA_GM_ENUM
  kNumOps
};

// The code of a function name (host code), -1 if unknown.
inline constexpr const char* kOpNames[] = {
#define MMA_GM_NAME(n) #n,
    MMA_GM_OPS(MMA_GM_NAME)
#undef MMA_GM_NAME
};
inline int op_code(const char* name) {
  for (int i = 0; i < kNumOps; ++i)
    if (std::strcmp(name, kOpNames[i]) == 0) return i;
  return -1;
}

MMA_HD float apply(int op, float x, const MufuTables& T) {
  switch (op) {
    case k_exp: return expf_(x, T);
    case k_log: return logf_(x);
    case k_tanh: return tanhf_(x, T);
    case k_erf: return erff_(x, T);
    case k_rsqrt: return rsqrt_full(x, T);
    case k_sigmoid: return sigmoid(x, T);
    case k_silu: return silu(x, T);
    case k_gelu: return gelu(x, T);
    case k_gelu_tanh: return gelu_tanh(x, T);
    case k_ex2_ftz: return ex2_ftz(x, T);
    case k_rcp_ftz: return rcp_ftz(x, T);
    default: return rsqrt_ftz(x, T);
  }
}

}  // namespace gm
}  // namespace mma
