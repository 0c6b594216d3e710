// The FDPA engine (fdpa_engine.h): planes of one K block, the core's chunk for handed-back
// lanes, and the choice of kernel.  No torch here.
#include "fdpa_engine.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "clones.h"
#include "decode_fast.h"
#include "fpenv.h"
#include "values_engine.h"

namespace mma {

namespace {

constexpr int32_t kZeroScaleExp = -100000;  // GST: a zero scale never enters emax

// sig * 2^(e - mbits) as an fp32 (exact: |sig| < 2^11, e - mbits in [-41, 31]).
inline float plane_value(int32_t sig, int32_t e, int32_t mbits) {
  if (e - mbits < -120)  // E-FDPA planes (no window): two normal scalings, exact result
    return float(sig) * f32_of(uint32_t(e - mbits + 64 + 127) << 23) * f32_of(uint32_t(127 - 64) << 23);
  return float(sig) * f32_of(uint32_t(e - mbits + 127) << 23);
}

// One decoded operand (significand s, exponent x) as the planes of the common rows hold it:
// the value and the exponent byte (-128 for a zero); returns the exponent the window test
// reads (0 for a zero).  In the window the scale 2^(x - mbits) is a normal fp32
// (plane_value's second case); a zero gives +0 (x = 0: a normal scale), no select
inline __attribute__((always_inline)) int32_t plane_entry(int32_t s, int32_t x0, int32_t mbits,
                                                          float& v, int8_t& e) {
  const int32_t nz = -int32_t(s != 0), x = x0 & nz;
  float p;
  const uint32_t pb = uint32_t(x - mbits + 127) << 23;
  std::memcpy(&p, &pb, sizeof p);
  v = float(s) * p;
  e = int8_t((x & nz) | (~nz & -128));
  return x;
}

// The planes of n decoded operands without scales, multi-pass order or E-FDPA's second
// plane (the common rows): v / e as fill_row stores them, in one loop the compiler
// vectorises; true when every nonzero exponent lies in the window (else the values stored
// are meaningless: the caller clears the row).
MMA_SIMD_CLONES
bool plane_run(const int32_t* __restrict sig, const int32_t* __restrict exp, int64_t n,
               int32_t mbits, float* __restrict v, int8_t* __restrict e) {
  int32_t lo = 0, hi = 0;  // exponents of nonzero operands (zeros count as 0: in the window)
  for (int64_t k = 0; k < n; ++k) {
    const int32_t x = plane_entry(sig[k], exp[k], mbits, v[k], e[k]);
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  return lo >= -kPlaneWindow && hi <= kPlaneWindow;
}

template <PlaneCode C>
using CodeT = std::conditional_t<plane_code_bytes(C) == 4, uint32_t,
                                 std::conditional_t<plane_code_bytes(C) == 2, uint16_t, uint8_t>>;

// One code as plane_run stores its decode (decode_code, then plane_entry, with no Decoded in
// between); nonzero (bad): a NaN / Inf code, or a nonzero exponent outside the window (the
// byte is then meaningless: the caller decodes instead)
template <PlaneCode C>
inline __attribute__((always_inline)) int32_t plane_of_code(uint32_t h, float& v, int8_t& e) {
  using P = PlaneCode;
  const DecCode d = C == P::kFp16        ? decode_code<5, 10, 0>(h, 15)
                    : C == P::kBf16      ? decode_code<8, 7, 0>(h, 127)
                    : C == P::kTf32      ? decode_code<8, 10, 13>(h, 127)
                    : C == P::kE4m3Fn    ? decode_code<4, 3, 0, kFn>(h, 7)
                    : C == P::kE5m2      ? decode_code<5, 2, 0>(h, 15)
                    : C == P::kE4m3Fnuz  ? decode_code<4, 3, 0, kFnuz>(h, 8)
                                         : decode_code<5, 2, 0, kFnuz>(h, 16);
  constexpr int32_t mbits = C == P::kBf16 ? 7 : C == P::kFp16 || C == P::kTf32 ? 10
                            : C == P::kE4m3Fn || C == P::kE4m3Fnuz ? 3 : 2;
  const int32_t x = plane_entry(d.sig, d.exp, mbits, v, e);
  return d.cls | -int32_t(uint32_t(x + kPlaneWindow) > uint32_t(2 * kPlaneWindow));
}
template <PlaneCode C>
inline __attribute__((always_inline)) uint8_t direct_row(const CodeT<C>* __restrict c, int64_t n,
                                                         float* __restrict v, int8_t* __restrict e) {
  int32_t bad = 0;
  for (int64_t k = 0; k < n; ++k) bad |= plane_of_code<C>(c[k], v[k], e[k]);
  return uint8_t(bad != 0);
}
// rows [k0, k1) of a row-major B (n columns, rows sk bytes apart) into the panels' rows of
// lanes (panels pstride apart; row k to panel row pos[k], or k), panel by panel: the stores
// run in order (row k of every panel at once put them all in one cache set) and the block's
// rows of B stay in cache; kW lanes at a time, a fixed trip count the compiler vectorises
template <PlaneCode C>
inline __attribute__((always_inline)) uint8_t direct_panels(const uint8_t* __restrict b, int64_t sk,
                                                            int64_t k0, int64_t k1, int64_t n,
                                                            int64_t pstride, const int32_t* pos,
                                                            float* __restrict v, int8_t* __restrict e) {
  int32_t bad = 0;
  for (int64_t j0 = 0; j0 < n; j0 += kW, v += pstride, e += pstride) {
    const int64_t nl = n - j0 < kW ? n - j0 : kW;
    for (int64_t k = k0; k < k1; ++k) {
      const CodeT<C>* c = reinterpret_cast<const CodeT<C>*>(b + k * sk) + j0;
      float* vq = v + (pos ? pos[k] : k) * kW;
      int8_t* eq = e + (pos ? pos[k] : k) * kW;
      if (nl == kW)
        for (int l = 0; l < kW; ++l) bad |= plane_of_code<C>(c[l], vq[l], eq[l]);
      else
        for (int64_t l = 0; l < nl; ++l) bad |= plane_of_code<C>(c[l], vq[l], eq[l]);
    }
  }
  return uint8_t(bad != 0);
}
#define MMA_DIRECT(C, name)                                                                      \
  MMA_SIMD_CLONES uint8_t direct_row_##name(const uint8_t* c, int64_t n, float* v, int8_t* e) { \
    return direct_row<C>(reinterpret_cast<const CodeT<C>*>(c), n, v, e);                       \
  }                                                                                              \
  MMA_SIMD_CLONES uint8_t direct_panels_##name(const uint8_t* b, int64_t sk, int64_t k0,        \
                                              int64_t k1, int64_t n, int64_t ps,               \
                                              const int32_t* pos, float* v, int8_t* e) {       \
    return direct_panels<C>(b, sk, k0, k1, n, ps, pos, v, e);                                   \
  }
MMA_DIRECT(PlaneCode::kFp16, fp16)
MMA_DIRECT(PlaneCode::kBf16, bf16)
MMA_DIRECT(PlaneCode::kTf32, tf32)
MMA_DIRECT(PlaneCode::kE4m3Fn, e4m3fn)
MMA_DIRECT(PlaneCode::kE5m2, e5m2)
MMA_DIRECT(PlaneCode::kE4m3Fnuz, e4m3fnuz)
MMA_DIRECT(PlaneCode::kE5m2Fnuz, e5m2fnuz)
#undef MMA_DIRECT
// the plain loops, by PlaneCode
constexpr DirectFill kPlainFill[kNumPlaneCodes] = {
    {direct_row_fp16, direct_panels_fp16},         {direct_row_bf16, direct_panels_bf16},
    {direct_row_tf32, direct_panels_tf32},         {direct_row_e4m3fn, direct_panels_e4m3fn},
    {direct_row_e5m2, direct_panels_e5m2},         {direct_row_e4m3fnuz, direct_panels_e4m3fnuz},
    {direct_row_e5m2fnuz, direct_panels_e5m2fnuz}};

// One operand row (A row i or B column j): true when it can use the planes.  kmap: plane
// position -> k (multi-pass), or null (identity).
// store(q, value, exponent (max side), exponent (min side)).
template <class Store>
bool fill_row(const Operand& r, int64_t K, int64_t Kp, const int32_t* kmap, int32_t mbits,
              const Dec* sc, int32_t block, uint8_t flags, bool window, Store store) {
  if (flags) return false;
  for (int64_t k = 0; k < K && window; ++k)
    if (r.sig[k] != 0) {
      const int32_t e = r.exp[k] + (sc ? sc[k / block].exp : 0);
      if (e < -kPlaneWindow || e > kPlaneWindow) return false;
    }
  for (int64_t q = 0; q < Kp; ++q) {
    const int64_t k = kmap ? kmap[q] : q;
    if (k < 0 || k >= K || r.sig[k] == 0) { store(q, 0.0f, int8_t(-128), int8_t(127)); continue; }
    const int32_t e = r.exp[k] + (sc ? sc[k / block].exp : 0);
    const bool in = e >= -kPlaneWindow && e <= kPlaneWindow;  // E-FDPA (no window): outside fails its check
    store(q, plane_value(r.sig[k], e, mbits), int8_t(in ? e : 100), int8_t(in ? e : -100));
  }
  return true;
}

}  // namespace

// ---- Fallback ------------------------------------------------------------------------------
uint32_t Fallback::chunk(int64_t i, int64_t j, int64_t k0, uint32_t acc) const {
  const Params& Pr = *P;
  const OutFmt o = out_fmt(Pr.rho);
  const bool half = Pr.rho == kRneFp16;
  const uint64_t a = half ? f16_bits_of_f32(acc) : acc;
  const int64_t K = pl->K;
  uint64_t r;
  if (ca.base) {  // planes filled from the codes (no Decoded rows): this chunk's decoded here
    // (a pass of a multi-pass instruction: its k gathered, padding left out)
    const bool map = !pl->kmap.empty();
    int32_t as[kMaxPassL], ae[kMaxPassL], bs[kMaxPassL], be[kMaxPassL];
    uint8_t ac[kMaxPassL], bc[kMaxPassL];
    int n = 0;
    for (int q = 0; q < Pr.L && (map || k0 + q < K); ++q) {
      const int64_t k = map ? pl->kmap[size_t(k0 + q)] : k0 + q;
      if (k < 0) continue;
      const Dec da = decode(Pr.fa, ca.at(i, k)), db = decode(Pr.fb, cb.at(j, k));
      as[n] = da.sig; ae[n] = da.exp; ac[n] = da.cls;
      bs[n] = db.sig; be[n] = db.exp; bc[n] = db.cls;
      ++n;
    }
    const Chunk ch{Operand{as, ae, ac}, Operand{bs, be, bc}, n, int(k0), SA ? SA + i * pl->nblk : nullptr,
                   SB ? SB + j * pl->nblk : nullptr};
    r = fused_op(Pr, o, ch, a, false);
  } else if (pl->kmap.empty()) {
    const Chunk ch{A->row(i, K).shifted(int(k0)), B->row(j, K).shifted(int(k0)),
                   int(std::min<int64_t>(Pr.L, K - k0)), int(k0),
                   SA ? SA + i * pl->nblk : nullptr, SB ? SB + j * pl->nblk : nullptr};
    r = fused_op(Pr, o, ch, a, false);
  } else {  // a pass of a multi-pass instruction: its k gathered (padding left out)
    int32_t as[kMaxPassL], ae[kMaxPassL], bs[kMaxPassL], be[kMaxPassL];
    uint8_t ac[kMaxPassL], bc[kMaxPassL];
    const Operand ra = A->row(i, K), rb = B->row(j, K);
    int n = 0;
    for (int q = 0; q < Pr.L; ++q) {
      const int32_t k = pl->kmap[size_t(k0 + q)];
      if (k < 0) continue;
      as[n] = ra.sig[k]; ae[n] = ra.exp[k]; ac[n] = ra.cls[k];
      bs[n] = rb.sig[k]; be[n] = rb.exp[k]; bc[n] = rb.cls[k];
      ++n;
    }
    const Chunk ch{Operand{as, ae, ac}, Operand{bs, be, bc}, n, int(k0), nullptr, nullptr};
    r = fused_op(Pr, o, ch, a, false);
  }
  return half ? f32_bits_of_f16(uint32_t(r)) : uint32_t(r);
}

uint32_t Fallback::join(uint32_t t, uint32_t c) const {
  if (P->rho != kRneFp16) return uint32_t(epilogue_add(*P, t, c));
  return f32_bits_of_f16(uint32_t(epilogue_add(*P, f16_bits_of_f32(t), f16_bits_of_f32(c))));
}

// ---- FdpaEngine ----------------------------------------------------------------------------
static FdpaKernels kernels_of(Isa isa) {
  return isa == Isa::kAvx2 ? fdpa_kernels_avx2() : isa == Isa::kAvx512 ? fdpa_kernels_avx512()
         : isa == Isa::kNeon ? fdpa_kernels_neon() : FdpaKernels{};
}
static DirectFill fill_of(const FdpaKernels& ks, PlaneCode c) {
  const DirectFill own = ks.direct[int(c)];
  return own.row && own.panels ? own : kPlainFill[int(c)];
}
DirectFill direct_fill(PlaneCode c, Isa isa) { return fill_of(kernels_of(isa), c); }

bool isa_has_kernels(Isa isa) {
  switch (isa) {
    case Isa::kAvx2: return fdpa_kernels_avx2().t != nullptr;
    case Isa::kAvx512: return fdpa_kernels_avx512().t != nullptr;
    case Isa::kNeon: return fdpa_kernels_neon().t != nullptr;
    default: return false;
  }
}

ValueKernels value_kernels(Isa isa) {
  switch (isa) {
    case Isa::kAvx2: return value_kernels_avx2();
    case Isa::kAvx512: return value_kernels_avx512();
    case Isa::kNeon: return value_kernels_neon();
    default: return ValueKernels{};
  }
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kNeon: return "neon";
    default: return "scalar";
  }
}

bool t_zero_masks(const Params& P) {
  return (P.op == kTFdpa || P.op == kStFdpa) && P.has_zero_exp() && P.zero_exp > P.fo.emin();
}

// A nonzero c takes at least the output's emin and c = 0 at least -64 in a narrow kernel
// (kern/t_fdpa.inc), every nonzero product at least -62 (the plane window), a zero product's
// byte at most -97 (-128 plus a window exponent), and F <= 29 (eligible.cpp): with an emin at
// or above -96 every emax is at least F - 126 and at most 62, c's (above F + 97 only for a
// NaN or an infinity: 255 - 127) or a zero_exp / emax_floor's: the range test keeps its top
bool t_narrow(const Params& P) { return P.fo.emin() >= -96; }

// Every lane's emax is at least min(emin, F - 126): a nonzero c takes at least the output's
// emin, c = 0 at least F - 126 (kern/t_fdpa.inc), products only raise it.  So an emax_floor
// at or below that never moves it (the registry's -133).  A zero_exp reaches c = 0 lanes
// through c's exponent; chunks holding a zero operand only where the planes carry zero
// masks (t_zero_masks).
TShape t_shape(const Params& P) {
  TShape s;
  s.L = P.L;
  s.G = std::min(P.L, 1 << std::max(0, 29 - P.F));
  s.half = P.rho == kRneFp16;
  s.e8m13 = P.rho == kRzE8m13;
  const int32_t low = std::min(P.fo.emin(), P.F - 126);
  s.zx = t_zero_masks(P);
  s.floor = P.emax_floor > low;
  s.ovf = (int64_t(2 + 4 * P.L) << P.F) > (int64_t(1) << 31);
  s.zplus = s.half && P.zero_plus;
  s.cfinal = P.c_final != 0;
  s.narrow = t_narrow(P);
  return s;
}

int t_shape_index(const Params& P) {
  const TShape s = t_shape(P);
  for (int i = 0; i < kNumTShapes; ++i)
    if (kTShapes[i] == s) return i;
  return -1;
}

bool FdpaEngine::setup(const Params& P, Isa isa) {
  const FdpaKernels ks = kernels_of(isa);
  kind_ = fast_eligible(P);
  fn_ = kind_ == FastKind::kFdpa ? ks.t : kind_ == FastKind::kTr ? ks.tr
        : kind_ == FastKind::kE ? ks.e : kind_ == FastKind::kGst ? ks.gst : nullptr;
  // MMA_EMU_CPU_GENERIC=1: the kernel that reads everything from Params, for every row (tests)
  const char* g = std::getenv("MMA_EMU_CPU_GENERIC");
  const bool generic = !fn_ || (g && *g == '1');
  const int ts = kind_ == FastKind::kFdpa && !generic ? t_shape_index(P) : -1;
  const PanelFn shaped = kind_ != FastKind::kFdpa && !generic ? ks.fixed(P) : nullptr;
  fixed_ = ts >= 0 || shaped;
  for (int c = 0; c < kNumPlaneCodes; ++c) fill_[c] = fill_of(ks, PlaneCode(c));
  if (ts >= 0) fn_ = ks.t_fixed[ts];
  if (shaped) fn_ = shaped;
  P_ = P;
  kpos_ = KPos{};
  if (P.passes > 1) {
    kpos_.instr = int64_t(P.L) * P.passes;
    kpos_.at.assign(size_t(kpos_.instr), 0);
    for (int p = 0; p < P.passes; ++p)
      for (int q = 0; q < P.L; ++q) kpos_.at[size_t(pass_k(P, p, q))] = p * P.L + q;
  }
  filled_ = false;
  return fn_ != nullptr;
}

namespace {

// plane_run over the lanes [l0, l1) of panel rows [k0, k0 + n) (B's columns p * kW + l): each
// column's run into a buffer, then stored a row of lanes at a time; ok[l] cleared where a
// column leaves the window (its lanes are then meaningless: the caller clears them)
void panel_runs(const Decoded& B, int64_t K, int64_t p, int64_t l0, int64_t l1, int64_t k0,
                int64_t n, int32_t mbits, const KPos& pos, float* v, int8_t* e, uint8_t* ok) {
  constexpr int64_t kRun = 64;
  float tv[kW][kRun];
  int8_t te[kW][kRun];
  for (int64_t kc = k0; kc < k0 + n; kc += kRun) {
    const int64_t m = std::min(kRun, k0 + n - kc);
    for (int64_t l = l0; l < l1; ++l) {
      const int64_t j = p * kW + l;
      if (ok[l]) ok[l] = plane_run(B.sig.data() + j * K + kc, B.exp.data() + j * K + kc, m, mbits, tv[l], te[l]);
      if (!ok[l]) {
        std::fill(tv[l], tv[l] + m, 0.0f);
        std::fill(te[l], te[l] + m, int8_t(-128));
      }
    }
    pos.each(kc, m, [&](int64_t k, int64_t q) {
      for (int64_t l = l0; l < l1; ++l) {
        v[q * kW + l] = tv[l][k];
        e[q * kW + l] = te[l][k];
      }
    });
  }
}

}  // namespace

bool FdpaEngine::plain(bool scales) const {
  return P_.op != kEFdpa && (!scales || (P_.op == kGstFdpa && P_.passes == 1));
}

void FdpaEngine::size_planes(int64_t M, int64_t N, int64_t K, bool init) {
  Planes& pl = pl_;
  const int64_t instr = int64_t(P_.L) * P_.passes;
  pl.M = M; pl.N = N; pl.K = K;
  pl.Kp = (K + instr - 1) / instr * instr;
  pl.NP = (N + kW - 1) / kW;
  const size_t na = size_t(M * pl.Kp), nb = size_t(pl.NP * pl.Kp * kW);
  if (init) {
    pl.av.assign(na, 0.0f);
    pl.ae.assign(na, int8_t(-128));
    pl.bv.assign(nb, 0.0f);
    pl.be.assign(nb, int8_t(-128));
  } else {  // every entry is written
    pl.av.resize(na);
    pl.ae.resize(na);
    pl.bv.resize(nb);
    pl.be.resize(nb);
  }
}

bool FdpaEngine::begin(int64_t M, int64_t N, int64_t K, bool scales) {
  filled_ = false;
  direct_ = false;
  if (!plain(scales)) return false;
  size_planes(M, N, K, false);
  pl_.row_ok.assign(size_t(M), 1);
  pl_.col_ok.assign(size_t(pl_.NP * kW), 0);
  std::fill(pl_.col_ok.begin(), pl_.col_ok.begin() + N, uint8_t(1));
  filled_ = true;
  return true;
}

void FdpaEngine::fill_a(const Decoded& A, int64_t i0, int64_t i1, int64_t k0, int64_t n) {
  Planes& pl = pl_;
  thread_local std::vector<float> tv;
  thread_local std::vector<int8_t> te;
  for (int64_t i = i0; i < i1; ++i) {
    uint8_t& ok = pl.row_ok[size_t(i)];
    if (!ok) continue;
    float* v = pl.av.data() + i * pl.Kp;
    int8_t* e = pl.ae.data() + i * pl.Kp;
    const int32_t* sg = A.sig.data() + i * pl.K + k0;
    const int32_t* ex = A.exp.data() + i * pl.K + k0;
    if (!kpos_.on()) {
      ok = plane_run(sg, ex, n, P_.fa.mbits, v + k0, e + k0);
      continue;
    }
    tv.resize(size_t(n));  // multi-pass: the run, then each k to its plane position
    te.resize(size_t(n));
    ok = plane_run(sg, ex, n, P_.fa.mbits, tv.data(), te.data());
    kpos_.each(k0, n, [&](int64_t k, int64_t q) {
      v[q] = tv[size_t(k)];
      e[q] = te[size_t(k)];
    });
  }
}

void FdpaEngine::fill_b(const Decoded& B, int64_t j0, int64_t j1, int64_t k0, int64_t n) {
  Planes& pl = pl_;
  for (int64_t p = j0 / kW; p * kW < j1; ++p) {
    const int64_t at = p * pl.Kp * kW;
    panel_runs(B, pl.K, p, std::max(j0, p * kW) - p * kW, std::min(j1, p * kW + kW) - p * kW, k0, n,
               P_.fb.mbits, kpos_, pl.bv.data() + at, pl.be.data() + at, pl.col_ok.data() + p * kW);
  }
}

bool FdpaEngine::fill_direct(const CodeRows& a, PlaneCode a_code, const CodeRows& b,
                             PlaneCode b_code, int64_t M, int64_t N, int64_t K, Decoded& A,
                             Decoded& B, const ParFor& par) {
  Planes& pl = pl_;
  // A's rows contiguous along k; B's columns adjacent (row-major B) or contiguous along k
  // (a transposed one, as nn.Linear's weight); other layouts decode as usual, in tiles
  const bool b_rows = b.sr == b.esize;
  if (!filled_ || P_.L > kMaxPassL || pl.M != M || pl.N != N || pl.K != K ||
      a.esize != plane_code_bytes(a_code) || b.esize != plane_code_bytes(b_code) ||
      a.sk != a.esize || (!b_rows && b.sk != b.esize))
    return false;
  // a multi-pass instruction's k in pass order: k to plane position pos[k] (build() writes
  // the positions of no k)
  std::vector<int32_t> pos;
  if (kpos_.on())
    for (int64_t k = 0; k < K; ++k) pos.push_back(int32_t(kpos_.pos(k)));
  const int32_t* at = pos.empty() ? nullptr : pos.data();
  const DirectRow row = fill_[int(a_code)].row;
  std::atomic<bool> bad{false};
  par(M, 16, [&](int64_t lo, int64_t hi) {
    std::vector<float> tv(at ? size_t(K) : 0);
    std::vector<int8_t> te(at ? size_t(K) : 0);
    for (int64_t i = lo; i < hi; ++i) {
      float* v = pl.av.data() + i * pl.Kp;
      int8_t* e = pl.ae.data() + i * pl.Kp;
      if (row(a.base + i * a.sr, K, at ? tv.data() : v, at ? te.data() : e))
        bad.store(true, std::memory_order_relaxed);
      for (int64_t k = 0; at && k < K; ++k) {
        v[at[k]] = tv[size_t(k)];
        e[at[k]] = te[size_t(k)];
      }
    }
  });
  if (b_rows) {  // blocks of 64 rows of B, each to every panel
    const DirectPanels panels = fill_[int(b_code)].panels;
    constexpr int64_t kRows = 64;
    par((K + kRows - 1) / kRows, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t t = lo; t < hi; ++t)
        if (panels(b.base, b.sk, t * kRows, std::min(K, t * kRows + kRows), N, pl.Kp * kW, at,
                   pl.bv.data(), pl.be.data()))
          bad.store(true, std::memory_order_relaxed);
    });
  } else {  // panel by panel: each column's run of 64 k, then stored a row of lanes at a time
    const DirectRow colrun = fill_[int(b_code)].row;
    par(pl.NP, 1, [&](int64_t lo, int64_t hi) {
      constexpr int64_t kRun = 64;
      float tv[kW][kRun];
      int8_t te[kW][kRun];
      for (int64_t p = lo; p < hi; ++p) {
        const int64_t j0 = p * kW, nl = std::min<int64_t>(kW, N - j0);
        float* v = pl.bv.data() + p * pl.Kp * kW;
        int8_t* e = pl.be.data() + p * pl.Kp * kW;
        for (int64_t kc = 0; kc < K; kc += kRun) {
          const int64_t m = std::min(kRun, K - kc);
          for (int64_t l = 0; l < nl; ++l)
            if (colrun(b.base + (j0 + l) * b.sr + kc * b.esize, m, tv[l], te[l]))
              bad.store(true, std::memory_order_relaxed);
          for (int64_t k = 0; k < m; ++k) {
            const int64_t q = at ? at[kc + k] : kc + k;
            for (int64_t l = 0; l < nl; ++l) {
              v[q * kW + l] = tv[l][k];
              e[q * kW + l] = te[l][k];
            }
          }
        }
      }
    });
  }
  if (bad.load()) return false;
  A.row_flags.assign(size_t(M), 0);
  B.row_flags.assign(size_t(N), 0);
  direct_ = true;
  ca_ = a;
  cb_ = b;
  return true;
}

void FdpaEngine::build(const Decoded& A, const Decoded& B, const Dec* SA, const Dec* SB,
                       const uint8_t* fsa, const uint8_t* fsb, int64_t nblk, int64_t M, int64_t N,
                       int64_t K, const ParFor& par) {
  const Params& P = P_;
  Planes& pl = pl_;
  const int64_t instr = int64_t(P.L) * P.passes;
  const bool two = P.op == kEFdpa;  // E-FDPA: the minimum-side planes too
  // the common rows (no scales folded in, one exponent plane; multi-pass ones in pass order,
  // kpos_) through plane_run: while decoding (begin, fill_a, fill_b), or here
  const bool plain_rows = plain(SA != nullptr);
  if (filled_ && (pl.M != M || pl.N != N || pl.K != K)) filled_ = false;  // (not this block's)
  if (plain_rows && !filled_) {
    begin(M, N, K, SA != nullptr);
    par(M, 16, [&](int64_t lo, int64_t hi) { fill_a(A, lo, hi, 0, K); });
    par(N, 16, [&](int64_t lo, int64_t hi) { fill_b(B, lo, hi, 0, K); });
  }
  if (!plain_rows) {
    size_planes(M, N, K, true);
    pl.row_ok.assign(size_t(M), 0);
    pl.col_ok.assign(size_t(pl.NP * kW), 0);
  }
  filled_ = false;
  pl.nblk = nblk;
  const int64_t Kp = pl.Kp;
  pl.ae2.assign(two ? size_t(M * Kp) : 0, int8_t(127));
  pl.be2.assign(two ? size_t(pl.NP * Kp * kW) : 0, int8_t(127));
  pl.kmap.clear();
  if (P.passes > 1) {  // each instruction's k pass by pass
    pl.kmap.assign(size_t(Kp), -1);
    for (int64_t k0 = 0; k0 < Kp; k0 += instr)
      for (int p = 0; p < P.passes; ++p)
        for (int q = 0; q < P.L; ++q) {
          const int64_t k = k0 + pass_k(P, p, q);
          if (k < K) pl.kmap[size_t(k0 + p * P.L + q)] = int32_t(k);
        }
  }
  const int32_t* kmap = pl.kmap.empty() ? nullptr : pl.kmap.data();
  // the plane positions of no product (K's padding): plane_run's rows leave them unwritten
  std::vector<int64_t> pads;
  for (int64_t q = kmap ? K / instr * instr : K; q < Kp; ++q)
    if (!kmap || kmap[q] < 0) pads.push_back(q);
  const bool gst = P.op == kGstFdpa;
  const bool scaled = SA != nullptr && !gst;  // ST-FDPA folds the scale exponents in
  const bool window = P.op != kEFdpa;  // E-FDPA reads values only (exponent plane unused)
  if (gst) {
    auto sval = [&](const Dec& d) { return double(d.sig) * std::ldexp(1.0, d.exp - P.fs.mbits); };
    auto put = [&](const Dec& d, double& v, int32_t& e) {
      v = d.cls == kFinite ? sval(d) : 0.0;
      e = v != 0.0 ? d.exp : kZeroScaleExp;
    };
    pl.sav.resize(size_t(M * nblk));
    pl.sae.resize(size_t(M * nblk));
    pl.sbv.assign(size_t(pl.NP * nblk * kW), 0.0);
    pl.sbe.assign(size_t(pl.NP * nblk * kW), kZeroScaleExp);
    par(M, 64, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i)
        for (int64_t b = 0; b < nblk; ++b) put(SA[i * nblk + b], pl.sav[size_t(i * nblk + b)], pl.sae[size_t(i * nblk + b)]);
    });
    par(N, 64, [&](int64_t lo, int64_t hi) {
      for (int64_t j = lo; j < hi; ++j)
        for (int64_t b = 0; b < nblk; ++b) {
          const size_t at = size_t(((j / kW) * nblk + b) * kW + j % kW);
          put(SB[j * nblk + b], pl.sbv[at], pl.sbe[at]);
        }
    });
  }
  par(M, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      float* v = pl.av.data() + i * Kp;
      int8_t* e = pl.ae.data() + i * Kp;
      int8_t* e2 = two ? pl.ae2.data() + i * Kp : nullptr;
      const uint8_t fl = A.row_flags[size_t(i)] | (SA ? fsa[i] : 0);
      bool ok;
      if (plain_rows) {  // the window checked by plane_run; the flags and the padding here
        ok = pl.row_ok[size_t(i)] && !fl;
        if (ok)
          for (int64_t q : pads) {
            v[q] = 0.0f;
            e[q] = int8_t(-128);
          }
      } else {
        ok = fill_row(A.row(i, K), K, Kp, kmap, P.fa.mbits, scaled ? SA + i * nblk : nullptr,
                      P.block, fl, window, [&](int64_t k, float x, int8_t ex, int8_t ex2) {
                        v[k] = x; e[k] = ex;
                        if (e2) e2[k] = ex2;
                      });
      }
      pl.row_ok[size_t(i)] = ok;
      if (!ok) {
        std::fill(v, v + Kp, 0.0f);
        std::fill(e, e + Kp, int8_t(-128));
        if (e2) std::fill(e2, e2 + Kp, int8_t(127));
      }
    }
  });
  // B's columns, and with plane_run the panels' padding lanes (j >= N)
  par(plain_rows ? pl.NP * kW : N, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t j = lo; j < hi; ++j) {
      const int64_t at = (j / kW) * Kp * kW + j % kW;
      float* v = pl.bv.data() + at;
      int8_t* e = pl.be.data() + at;
      int8_t* e2 = two ? pl.be2.data() + at : nullptr;
      bool ok = false;
      if (j >= N) {
      } else if (plain_rows) {
        ok = pl.col_ok[size_t(j)] && !(B.row_flags[size_t(j)] | (SB ? fsb[j] : 0));
        if (ok)
          for (int64_t q : pads) {
            v[q * kW] = 0.0f;
            e[q * kW] = int8_t(-128);
          }
      } else {
        ok = fill_row(B.row(j, K), K, Kp, kmap, P.fb.mbits, scaled ? SB + j * nblk : nullptr,
                      P.block, B.row_flags[size_t(j)] | (SB ? fsb[j] : 0), window,
                      [&](int64_t k, float x, int8_t ex, int8_t ex2) {
                        v[k * kW] = x; e[k * kW] = ex;
                        if (e2) e2[k * kW] = ex2;
                      });
      }
      pl.col_ok[size_t(j)] = ok;
      if (!ok)
        for (int64_t k = 0; k < Kp; ++k) {
          v[k * kW] = 0.0f;
          e[k * kW] = int8_t(-128);
          if (e2) e2[k * kW] = int8_t(127);
        }
    }
  });
  // (a zero_exp at or below the output's emin never moves emax beside a nonzero c, whose
  // exponent is at least emin, and c = 0 takes it anyway: no masks, as for the registry rows)
  const bool zmasks = t_zero_masks(P);
  pl.nch = zmasks ? Kp / P.L : 0;
  pl.az.assign(size_t(M * pl.nch), 0);
  pl.bz.assign(size_t(pl.NP * pl.nch), 0);
  if (zmasks) {
    const int64_t nch = pl.nch, L = P.L;
    par(M, 64, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i)
        for (int64_t q = 0; q < Kp; ++q)
          if (pl.ae[size_t(i * Kp + q)] == -128) pl.az[size_t(i * nch + q / L)] = 1;
    });
    par(pl.NP, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t p = lo; p < hi; ++p)
        for (int64_t q = 0; q < Kp; ++q)
          for (int l = 0; l < kW; ++l)
            if (pl.be[size_t((p * Kp + q) * kW + l)] == -128) pl.bz[size_t(p * nch + q / L)] |= 1u << l;
    });
  }
  if (two) {  // E-FDPA: fp64 copies of the value planes
    pl.avd.resize(pl.av.size());
    pl.bvd.resize(pl.bv.size());
    par(M, 64, [&](int64_t lo, int64_t hi) {
      for (int64_t q = lo * Kp; q < hi * Kp; ++q) pl.avd[size_t(q)] = double(pl.av[size_t(q)]);
    });
    par(pl.NP, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t q = lo * Kp * kW; q < hi * Kp * kW; ++q) pl.bvd[size_t(q)] = double(pl.bv[size_t(q)]);
    });
  } else {
    pl.avd.clear();
    pl.bvd.clear();
  }
  fb_ = Fallback{&P_, &pl_, &A, &B, SA, SB};
  if (direct_) {  // (the planes of this block, filled by fill_direct)
    fb_.ca = ca_;
    fb_.cb = cb_;
  }
  direct_ = false;
}

void FdpaEngine::run(int64_t i0, int64_t i1, int64_t k0, int64_t k1, uint32_t* acc,
                     int64_t ld, int64_t p0, int64_t p1) const {
  if (k1 <= k0 || i1 <= i0 || p1 <= p0) return;  // an empty range leaves the accumulators as they are
  const Params& P = P_;
  const int64_t instr = int64_t(P.L) * P.passes;
  // the planes are zero-padded to Kp: a range ending at K ends at Kp
  const int64_t kend = std::min(pl_.Kp, (k1 + instr - 1) / instr * instr);
  // K blocks of about 128 keep a panel slice in L1 while the row block sweeps it; whole
  // instructions (the c_join = "final" value lives in registers across a block's passes)
  const int64_t KB = std::max<int64_t>(1, 128 / instr) * instr;
  FpEnvGuard env;  // round to nearest, no FTZ / DAZ
  for (int64_t kb = k0; kb < kend; kb += KB)
    for (int64_t p = p0; p < p1; ++p)
      fn_(P, pl_, fb_, i0, i1, p, kb, std::min(kend, kb + KB), acc, ld);
}

}  // namespace mma
