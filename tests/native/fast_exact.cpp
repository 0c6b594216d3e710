// Exactness harness of the CPU fast paths without torch: the vector kernels (csrc/cpu/kern via
// fdpa_engine.h / values_engine.h) against the scalar core (csrc/core) on random, adversarial
// and bit-stream inputs.  Built natively (AVX2, AVX-512) and with an aarch64 cross compiler
// (NEON, run under qemu-user) by tests/test_cpu_fast_native.py.
//
// stdin: one registry row per line, "name p0 p1 ... p44" (cpp.params(spec)).  argv[1]: the
// instruction set ("avx2", "avx512", "neon"; "avx512w": AVX-512 with the 512-bit FMA /
// FTZ-AddMul kernels whatever the CPU's vendor); argv[2] (optional): seed.  Prints one line per
// row ("ok name path shape=... lanes=..." or "MISMATCH name ..."), then "N passed, N failed".
// MMA_EMU_CPU_GENERIC=1 runs the FDPA rows (T, ST, TR, GTR, E, GST) through the kernel that
// reads every option from Params (shape=generic) instead of the one compiled for their shape
// (shape=fixed).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../../csrc/cpu/fdpa_engine.h"
#include "../../csrc/cpu/fpenv.h"
#include "../../csrc/cpu/values_engine.h"

using namespace mma;

namespace {

// kFinish: one instruction per lane with c aimed at the dot (TR-FDPA's final renormalisation:
// T' + c' carrying into the next binade, cancelling to a lower one, c = +-0, tiny and special c,
// products near 2^-126 where the format reaches them)
enum Family { kNormal, kBits, kSpread, kCancel, kSpecial, kFinish, kNumFamilies };
const char* kFamilyNames[] = {"normal", "bits", "spread", "cancel", "special", "finish"};

struct Gen {
  std::mt19937_64 rng;
  uint64_t bits(int n) { return n >= 64 ? rng() : (rng() & ((uint64_t(1) << n) - 1)); }
  double uni() { return double(rng() >> 11) * (1.0 / 9007199254740992.0); }
};

int width(const FormatDesc& f) { return f.container == 32 ? 32 : f.ebits + f.mbits + (f.is_signed ? 1 : 0); }

// A code of format f: finite values near 1 (normal), any bits, any finite exponent (spread).
uint64_t code(Gen& g, const FormatDesc& f, Family fam) {
  const int w = width(f);
  if (fam == kBits || (fam == kSpecial && g.uni() < 0.05)) return g.bits(w);
  for (int tries = 0; tries < 64; ++tries) {
    uint64_t c;
    if (f.nan_style == kE8m0) {
      c = fam == kSpread ? g.bits(8) : uint64_t(f.bias + int(g.bits(3)) - 4);
    } else {
      const uint64_t sign = f.is_signed ? g.bits(1) : 0;
      const uint64_t mant = g.bits(f.mbits);
      uint64_t e;
      if (fam == kSpread) e = g.bits(f.ebits);
      else e = uint64_t(std::max<int64_t>(1, std::min<int64_t>((1 << f.ebits) - 2, f.bias + int(g.bits(2)) - 2)));
      if (f.ebits == 0) e = 0;
      c = (sign << (f.ebits + f.mbits)) | (e << f.mbits) | mant;
      if (f.container == 32) c <<= 13;  // tf32 / xf32 in fp32 words
      if (fam == kNormal && g.uni() < 0.1) c = 0;
    }
    if (decode(f, c).cls == kFinite) return c;
  }
  return 0;
}

// one C word of the output format (fp32 or fp16)
uint64_t out_code(Gen& g, const Params& P, Family fam) { return code(g, P.fo, fam); }

struct Result {
  int64_t lanes = 0, fast = 0, bad = 0;
  // kFinish lanes, those the vector result got wrong, those where the core's result changes
  // with tr_renorm flipped (the family reaches the lanes where the two finishes differ)
  // (fin_dbad: differing lanes the vector result got wrong)
  int64_t fin_lanes = 0, fin_bad = 0, fin_differ = 0, fin_dbad = 0;
  std::string first;
  const char* shape = "-";  // FDPA rows: the kernel compiled for the row's shape, or the generic one
};

double value_of(const FormatDesc& f, uint64_t c) {
  const Dec d = decode(f, c);
  return d.cls == kFinite ? std::ldexp(double(d.sig), d.exp - f.mbits) : 0.0;
}

// a code of f near 2^e (e inside f's normal range), random significand and sign
uint64_t code_near(Gen& g, const FormatDesc& f, int e) {
  for (int t = 0; t < 64; ++t) {
    const int be = std::max(1, std::min((1 << f.ebits) - 2, e + f.bias));
    uint64_t c = ((f.is_signed ? g.bits(1) : 0) << (f.ebits + f.mbits)) | (uint64_t(be) << f.mbits) | g.bits(f.mbits);
    if (f.container == 32) c <<= 13;
    if (decode(f, c).cls == kFinite) return c;
  }
  return code(g, f, kNormal);
}

// c (fp32 word) aimed at the dot d of the lane's products
uint32_t finish_c(Gen& g, double d) {
  const double u = std::ldexp(1.0 + g.uni(), -int(8 + g.bits(5)));  // 2^-8 .. 2^-39
  const double s = g.bits(1) ? 1.0 : -1.0;
  switch (g.bits(3)) {
    case 0: return bits_of(float(-d));                 // cancels to the products' low bits
    case 1: return bits_of(float(-d * (1 + s * u)));   // cancels to a lower binade
    case 2: {                                          // T' + c' straddles a power of two
      const double m = d == 0 ? 1.0 : std::ldexp(1.0, std::ilogb(d) + 1 + int(g.bits(1)));
      return bits_of(float((d < 0 ? -m : m) * (1 + s * u) - d));
    }
    case 3: return bits_of(float(d * (1 + s * u)));    // same sign, about the same size: carry
    case 4: return g.bits(1) ? 0x80000000u : 0u;       // c = -0 / +0 (E at -126)
    case 5: return uint32_t(g.bits(1) << 31) | uint32_t(g.bits(23));  // subnormal c
    case 6: {
      const uint32_t sp[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u};
      return sp[g.bits(2)];
    }
    default: return bits_of(float(-d + std::ldexp(s, std::ilogb(d == 0 ? 1.0 : d) - int(20 + g.bits(4)))));
  }
}

// TR/GTR rows of kFinish: lanes whose core result changes with tr_renorm flipped are rare in
// random data (ties of the final RNE against the renormalisation's extra bit), so candidates
// (products spread over the formats' exponents, c aimed at their dot) are searched with the
// core and the differing ones placed on the diagonal (a row t, b row t, c[t][t]).
void place_differing(const Params& P, Gen& g, int64_t K, int64_t M, int64_t N,
                     std::vector<uint64_t>& a, std::vector<uint64_t>& b, std::vector<uint64_t>& c) {
  Params Q = P;
  Q.tr_renorm = !P.tr_renorm;
  std::vector<uint64_t> ra(static_cast<size_t>(K)), rb(static_cast<size_t>(K));
  const int spa = std::min(24, (1 << P.fa.ebits) - 2), spb = std::min(24, (1 << P.fb.ebits) - 2);
  int64_t t = 0;
  for (int tries = 0; tries < 40000 && t < std::min(M, N); ++tries) {
    const bool tiny = P.fa.ebits == 8 && P.fb.ebits == 8 && g.bits(2) == 0;
    const int ea = tiny ? -64 : 0, eb = tiny ? -62 : 0;
    double d = 0;
    uint64_t cc;
    if (!tiny && g.bits(1)) {
      // T with its last bit 24 below its top (p1, p2 24 binades apart) against c: T' + c'
      // carrying into the next binade (p1 ~ 2^(E-7), c ~ 2^(E+1) - m 2^(E-23)), where the
      // renormalisation drops the bit the plain finish rounds with, or cancelling one binade
      // (p1 ~ 2^(E-8), c ~ -(2^E + m 2^(E-23))), where it keeps T's bit F2 + 1
      const int ta = (1 << P.fa.ebits) - 2 - P.fa.bias, tb = (1 << P.fb.ebits) - 2 - P.fb.bias;
      const int e1a = std::min(ta, 6) - int(g.bits(1)), e1b = std::min(tb, 6) - int(g.bits(1));
      const int e2b = std::max(1 - P.fb.bias, e1b - 14) + int(g.bits(1));
      const int e2a = e1a + e1b - 24 - int(g.bits(2)) + 1 - e2b;
      std::fill(ra.begin(), ra.end(), 0);
      std::fill(rb.begin(), rb.end(), 0);
      const int64_t k1 = int64_t(g.bits(8)) % K, k2 = (k1 + 1 + int64_t(g.bits(8)) % (K - 1)) % K;
      ra[size_t(k1)] = code_near(g, P.fa, e1a);
      rb[size_t(k1)] = code_near(g, P.fb, e1b);
      ra[size_t(k2)] = code_near(g, P.fa, e2a);
      rb[size_t(k2)] = code_near(g, P.fb, e2b);
      for (int64_t k = 0; k < K; ++k) d += value_of(P.fa, ra[size_t(k)]) * value_of(P.fb, rb[size_t(k)]);
      const double m = double(g.bits(4));
      if (g.bits(1)) {
        const int E = e1a + e1b + 7 - int(g.bits(1));
        cc = bits_of(float((d < 0 ? -1 : 1) * (std::ldexp(1.0, E + 1) - std::ldexp(m, E - 23))));
      } else {  // c ~ -2^E against T ~ 2^(E-8): S falls one binade, T's bit 2^(E-32) survives
        const int E = e1a + e1b + 8 + int(g.bits(1));
        cc = bits_of(float((d < 0 ? 1 : -1) * (std::ldexp(1.0, E) + std::ldexp(m, E - 23))));
      }
    } else {
      for (int64_t k = 0; k < K; ++k) {
        ra[size_t(k)] = g.bits(3) ? code_near(g, P.fa, ea - int(g.bits(5) % spa) / 2) : 0;
        rb[size_t(k)] = code_near(g, P.fb, eb - int(g.bits(5) % spb) / 2);
        d += value_of(P.fa, ra[size_t(k)]) * value_of(P.fb, rb[size_t(k)]);
      }
      cc = tiny && g.bits(1) ? (g.bits(1) << 31) : finish_c(g, d);
    }
    Decoded A1, B1;
    A1.resize(1, K);
    B1.resize(1, K);
    A1.decode_row(0, K, P.fa, [&](int64_t k) { return ra[size_t(k)]; });
    B1.decode_row(0, K, P.fb, [&](int64_t k) { return rb[size_t(k)]; });
    const uint8_t fl = A1.row_flags[0] | B1.row_flags[0];
    if (dot_fused(P, A1.row(0, K), B1.row(0, K), int(K), cc, nullptr, nullptr, fl) ==
        dot_fused(Q, A1.row(0, K), B1.row(0, K), int(K), cc, nullptr, nullptr, fl))
      continue;
    std::copy(ra.begin(), ra.end(), a.begin() + t * K);
    std::copy(rb.begin(), rb.end(), b.begin() + t * K);
    c[size_t(t * N + t)] = cc;
    ++t;
  }
}

// The FDPA rows: the engine over all of K (+ the core for lanes the planes do not hold)
// against dot_fused per output.
void check_fdpa(const Params& P0, Isa isa, Family fam, Gen& g, Result& res) {
  Params P = P0;
  P.epilogue = 0;
  FdpaEngine eng;
  if (!eng.setup(P, isa)) return;
  const FastKind kind = fast_eligible(P);
  if (kind == FastKind::kFdpa || kind == FastKind::kTr || kind == FastKind::kE || kind == FastKind::kGst)
    res.shape = eng.fixed_shape() ? "fixed" : "generic";
  const int64_t instr = int64_t(P.L) * P.passes;
  const bool fin = fam == kFinish;
  const int64_t M = 5, N = 37, K = fin ? instr : 3 * instr + 5;
  const bool scaled = P.op == kStFdpa || P.op == kGstFdpa;
  const int64_t nblk = scaled ? (K + P.block - 1) / P.block : 0;
  std::vector<uint64_t> a(size_t(M * K)), b(size_t(N * K)), c(size_t(M * N));
  for (auto& x : a) x = code(g, P.fa, fin ? kNormal : fam);
  for (auto& x : b) x = code(g, P.fb, fin ? kNormal : fam);
  for (auto& x : c) x = out_code(g, P, fin ? kNormal : fam);
  if (fin && P.fo.mbits == 23) {
    // rows 3, 4: products near 2^-126 where both formats reach it, else near their bottom
    for (int64_t i = 3; i < M; ++i)
      for (int64_t k = 0; k < K; ++k)
        a[size_t(i * K + k)] = code_near(g, P.fa, std::max(-63, 1 - P.fa.bias) + int(g.bits(2)) - 1);
    for (int64_t j = 0; j < N; ++j)
      if (j % 2)
        for (int64_t k = 0; k < K; ++k)
          b[size_t(j * K + k)] = code_near(g, P.fb, std::max(-63, 1 - P.fb.bias) + int(g.bits(2)) - 1);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double d = 0;
        for (int64_t k = 0; k < K; ++k) d += value_of(P.fa, a[size_t(i * K + k)]) * value_of(P.fb, b[size_t(j * K + k)]);
        c[size_t(i * N + j)] = finish_c(g, d);
      }
  }
  if (fam == kCancel)  // pairs of k cancel exactly: a[k+1] = a[k], b[k+1] = -b[k]
    for (int64_t k = 0; k + 1 < K; k += 2) {
      for (int64_t i = 0; i < M; ++i) a[size_t(i * K + k + 1)] = a[size_t(i * K + k)];
      const int sb = P.fb.ebits + P.fb.mbits + (P.fb.container == 32 ? 13 : 0);
      for (int64_t j = 0; j < N; ++j)
        b[size_t(j * K + k + 1)] = P.fb.is_signed ? (b[size_t(j * K + k)] ^ (uint64_t(1) << sb)) : b[size_t(j * K + k)];
    }
  if (fin && (P.op == kTrFdpa || P.op == kGtrFdpa)) place_differing(P, g, K, M, N, a, b, c);
  Decoded A, B;
  A.resize(M, K);
  B.resize(N, K);
  for (int64_t i = 0; i < M; ++i) A.decode_row(i, K, P.fa, [&](int64_t k) { return a[size_t(i * K + k)]; });
  for (int64_t j = 0; j < N; ++j) B.decode_row(j, K, P.fb, [&](int64_t k) { return b[size_t(j * K + k)]; });
  std::vector<Dec> SA(size_t(M * nblk)), SB(size_t(N * nblk));
  std::vector<uint8_t> fsa(size_t(M), 0), fsb(size_t(N), 0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t t = 0; t < nblk; ++t) {
      SA[size_t(i * nblk + t)] = decode(P.fs, code(g, P.fs, fam == kBits ? kSpecial : fam));
      fsa[size_t(i)] |= SA[size_t(i * nblk + t)].cls;
    }
  for (int64_t j = 0; j < N; ++j)
    for (int64_t t = 0; t < nblk; ++t) {
      SB[size_t(j * nblk + t)] = decode(P.fs, code(g, P.fs, fam == kBits ? kSpecial : fam));
      fsb[size_t(j)] |= SB[size_t(j * nblk + t)].cls;
    }
  eng.build(A, B, scaled ? SA.data() : nullptr, scaled ? SB.data() : nullptr, fsa.data(),
            fsb.data(), nblk, M, N, K, serial_for);
  const bool half = P.rho == kRneFp16;
  const int64_t W = eng.width();
  std::vector<uint32_t> acc(size_t(M * W), 0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      acc[size_t(i * W + j)] = half ? f32_bits_of_f16(uint32_t(c[size_t(i * N + j)])) : uint32_t(c[size_t(i * N + j)]);
  {
    FpEnvGuard env;
    eng.run(0, M, 0, K, acc.data(), W);
  }
  FpEnvGuard env;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      const uint8_t fl = A.row_flags[size_t(i)] | B.row_flags[size_t(j)] | (scaled ? fsa[size_t(i)] | fsb[size_t(j)] : 0);
      const uint64_t want = dot_fused(P, A.row(i, K), B.row(j, K), int(K), c[size_t(i * N + j)],
                                      scaled ? SA.data() + i * nblk : nullptr,
                                      scaled ? SB.data() + j * nblk : nullptr, fl);
      if (!(eng.row_ok(i) && eng.col_ok(j))) continue;  // those run the core (same function)
      ++res.fast;
      ++res.lanes;
      const uint32_t w = acc[size_t(i * W + j)];
      const uint64_t got = half ? f16_bits_of_f32(w) : w;
      if (fin) {
        ++res.fin_lanes;
        res.fin_bad += got != want;
        Params Q = P;
        Q.tr_renorm = !P.tr_renorm;
        const bool differ = dot_fused(Q, A.row(i, K), B.row(j, K), int(K), c[size_t(i * N + j)],
                                      scaled ? SA.data() + i * nblk : nullptr,
                                      scaled ? SB.data() + j * nblk : nullptr, fl) != want;
        res.fin_differ += differ;
        res.fin_dbad += differ && got != want;
      }
      if (got != want) {
        if (!res.bad++) {
          char buf[200];
          std::snprintf(buf, sizeof buf, "%s (%lld,%lld): got %#llx want %#llx", kFamilyNames[fam],
                        (long long)i, (long long)j, (unsigned long long)got, (unsigned long long)want);
          res.first = buf;
        }
      }
    }
}

template <class T>
T value(Gen& g, Family fam) {
  if constexpr (sizeof(T) == 4) {
    if (fam == kFinish) {  // value rows: FTZ-AddMul's flushes (products, sums near 2^-126, subnormal c)
      if (g.uni() < 0.2) return f32_of(uint32_t(g.bits(32)) & 0x807FFFFFu);
      const float m = float(1 + g.uni()) * std::ldexp(1.0f, -70 + int(g.bits(4)));
      return g.uni() < 0.5 ? -m : m;
    }
    if (fam == kBits || (fam == kSpecial && g.uni() < 0.05)) return f32_of(uint32_t(g.bits(32)));
    if (fam == kSpread) {
      const uint32_t w = uint32_t(g.bits(32));
      const float f = f32_of(w);
      return std::isfinite(f) ? f : 1.0f;
    }
    return float((g.uni() - 0.5) * 4);
  } else {
    if (fam == kBits || (fam == kSpecial && g.uni() < 0.05)) return f64_of(g.bits(64));
    if (fam == kSpread) {
      const double f = f64_of(g.bits(64));
      return std::isfinite(f) ? f : 1.0;
    }
    return (g.uni() - 0.5) * 4;
  }
}

bool g_wide = false;  // "avx512w": the 512-bit value kernels, whatever the CPU's vendor

template <class T>
void check_values(const Params& P0, Isa isa, Family fam, Gen& g, Result& res) {
  Params P = P0;
  P.epilogue = 0;
  ValuesEngine<T> eng;
  if (!eng.setup(P, isa)) return;
  if (g_wide) {
    eng.ks = value_kernels_avx512_wide();
    eng.W = sizeof(T) == 8 ? eng.ks.wd : eng.ks.wf;
  }
  const int64_t M = 7, N = 37, K = 4 * P.P + 29;
  std::vector<T> a(size_t(M * K)), b(size_t(K * N)), c(size_t(M * N));
  for (auto& x : a) x = value<T>(g, fam);
  for (auto& x : b) x = value<T>(g, fam);
  for (auto& x : c) x = value<T>(g, fam);
  if (fam == kCancel)
    for (int64_t k = 0; k + 1 < K; k += 2) {
      for (int64_t i = 0; i < M; ++i) a[size_t(i * K + k + 1)] = a[size_t(i * K + k)];
      for (int64_t j = 0; j < N; ++j) b[size_t((k + 1) * N + j)] = -b[size_t(k * N + j)];
    }
  // two K blocks, as the torch side runs long products
  const int64_t kb = (K / 2) / eng.LL * eng.LL;  // on the instruction grid
  std::vector<T> acc;
  FpEnvGuard env;
  for (int blk = 0; blk < 2; ++blk) {
    const int64_t k0 = blk ? kb : 0, kl = blk ? K - kb : kb;
    eng.pack(P, a.data(), K, 1, b.data(), N, 1, M, N, k0, kl, serial_for);
    if (acc.empty()) {
      acc.assign(size_t(M * eng.Np), T(0));
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) acc[size_t(i * eng.Np + j)] = c[size_t(i * N + j)];
    }
    eng.run(0, M, 0, eng.Kp, acc.data(), eng.Np);
  }
  std::vector<T> bt(static_cast<size_t>(K));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      for (int64_t k = 0; k < K; ++k) bt[size_t(k)] = b[size_t(k * N + j)];
      T want;
      if constexpr (sizeof(T) == 4) {
        want = P.op == kFma ? dot_fma<T>(P, a.data() + i * K, bt.data(), int(K), c[size_t(i * N + j)])
                            : dot_ftz(P, a.data() + i * K, bt.data(), int(K), c[size_t(i * N + j)]);
      } else {
        want = dot_fma<T>(P, a.data() + i * K, bt.data(), int(K), c[size_t(i * N + j)]);
      }
      const T got = acc[size_t(i * eng.Np + j)];
      ++res.lanes;
      ++res.fast;
      const bool same = (std::isnan(got) && std::isnan(want)) || bits_of(got) == bits_of(want);
      if (!same && !res.bad++) {
        char buf[200];
        std::snprintf(buf, sizeof buf, "%s (%lld,%lld): got %a want %a", kFamilyNames[fam],
                      (long long)i, (long long)j, double(got), double(want));
        res.first = buf;
      }
    }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: fast_exact avx2|avx512|avx512w|neon [seed] < rows\n");
    return 2;
  }
  const std::string isa_s = argv[1];
  g_wide = isa_s == "avx512w";
  const Isa isa = isa_s == "avx2" ? Isa::kAvx2 : (isa_s == "avx512" || g_wide) ? Isa::kAvx512
                  : isa_s == "neon" ? Isa::kNeon : Isa::kScalar;
  const uint64_t seed = argc > 2 ? std::stoull(argv[2]) : 1;
  if (!isa_has_kernels(isa)) {
    std::printf("no %s kernels in this build\n", isa_s.c_str());
    return 3;
  }
  int passed = 0, failed = 0;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string name;
    in >> name;
    std::vector<int64_t> v;
    int64_t x;
    while (in >> x) v.push_back(x);
    if (v.size() != size_t(kNumParams)) {
      std::printf("BADLINE %s (%zu parameters)\n", name.c_str(), v.size());
      ++failed;
      continue;
    }
    const Params P = parse_params(v.data());
    const FastKind kind = fast_eligible(P);
    Result res;
    Gen g{std::mt19937_64(seed * 1000003u + std::hash<std::string>{}(name))};
    for (int f = 0; f < kNumFamilies; ++f)
      for (int rep = 0; rep < 6; ++rep) {
        if (kind == FastKind::kFma || kind == FastKind::kFtz) {
          if (P.rho == kRneFp64) check_values<double>(P, isa, Family(f), g, res);
          else check_values<float>(P, isa, Family(f), g, res);
        } else if (kind != FastKind::kNone) {
          check_fdpa(P, isa, Family(f), g, res);
        }
      }
    const char* kinds[] = {"scalar", "fdpa", "fma", "ftz", "tr", "e", "gst"};
    if (kind == FastKind::kNone || res.lanes == 0) {
      std::printf("NOPATH %s %s\n", name.c_str(), kinds[int(kind)]);
      ++failed;
    } else if (res.bad) {
      std::printf("MISMATCH %s %s:%s %lld of %lld lanes finish=%lld/%lld/%lld/%lld; first %s\n", name.c_str(),
                  isa_s.c_str(), kinds[int(kind)], (long long)res.bad, (long long)res.lanes,
                  (long long)res.fin_bad, (long long)res.fin_lanes, (long long)res.fin_differ, (long long)res.fin_dbad,
                  res.first.c_str());
      ++failed;
    } else {
      std::printf("ok %s %s:%s shape=%s lanes=%lld finish=%lld/%lld/%lld/%lld\n", name.c_str(), isa_s.c_str(),
                  kinds[int(kind)], res.shape, (long long)res.lanes, (long long)res.fin_bad,
                  (long long)res.fin_lanes, (long long)res.fin_differ, (long long)res.fin_dbad);
      ++passed;
    }
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
