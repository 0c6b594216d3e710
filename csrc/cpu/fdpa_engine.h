// The vectorised FDPA kernels' data and driver, without torch (so the exactness harness of
// tests/native builds it for aarch64 too): decoded operands of one K block, their planes,
// the core's chunk for the lanes the vector code hands back, and the kernel table of each
// instruction set (kern_*.cpp, one source in kern/ compiled per ISA).
#pragma once
#include <cstdint>
#include <cstring>
#include <functional>
#include <new>
#include <vector>

#include "../core/chain.h"

namespace mma {

enum class Isa : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kNeon = 3 };
enum class FastKind : int { kNone = 0, kFdpa, kFma, kFtz, kTr, kE, kGst };

// The one eligibility test: which fast path serves this parameter vector, checking every
// Params field the fast paths rely on.  Anything unknown falls back to the scalar path.
FastKind fast_eligible(const Params& P);
// The instruction sets this build has vector kernels for (best first), and whether isa has
// one for kind.
bool isa_has_kernels(Isa isa);
const char* isa_name(Isa isa);

// Decoded operands (the core's Operand as structure of arrays): rows of K codes.
struct Decoded {
  std::vector<int32_t> sig, exp;
  std::vector<uint8_t> cls;
  std::vector<uint8_t> row_flags;  // row i holds a NaN or an infinity
  Operand row(int64_t i, int64_t K) const {
    return Operand{sig.data() + i * K, exp.data() + i * K, cls.data() + i * K};
  }
  void resize(int64_t rows, int64_t K) {
    sig.resize(size_t(rows * K));
    exp.resize(size_t(rows * K));
    cls.resize(size_t(rows * K));
    row_flags.assign(size_t(rows), 0);
  }
  // row i, k in [0, K): the codes get(k) in format f
  template <class Get>
  void decode_row(int64_t i, int64_t K, const FormatDesc& f, Get get) {
    uint8_t fl = 0;
    for (int64_t k = 0; k < K; ++k) {
      const Dec d = decode(f, get(k));
      const size_t at = size_t(i * K + k);
      sig[at] = d.sig;
      exp[at] = d.exp;
      cls[at] = d.cls;
      fl |= d.cls;
    }
    row_flags[size_t(i)] = fl;
  }
};

// fp16 accumulators live in the fast kernels as the fp32 word of the same value; these two
// conversions are exact for every fp16 code (NaN payloads included).  Mask selects rather
// than branches (GCC does not if-convert them under -ftrapping-math): the run loops
// (fast_fdpa.cpp: fp16 C in, fp16 D out) vectorise.
inline uint32_t sel_bits(bool m, uint32_t t, uint32_t f) { return (-uint32_t(m) & t) | (~-uint32_t(m) & f); }
inline uint32_t f32_bits_of_f16(uint32_t h) {
  const uint32_t s = (h & 0x8000u) << 16, e = (h >> 10) & 31, m = h & 1023;
  const uint32_t normal = ((e + 112) << 23) | (m << 13), special = 0x7F800000u | (m << 13);
  const uint32_t sub = bits_of(float(int32_t(m)) * 0x1p-24f);  // m 2^-24: a normal fp32 (or 0)
  return s | sel_bits(e == 31, special, sel_bits(e == 0, sub, normal));
}
inline uint32_t f16_bits_of_f32(uint32_t f) {  // f holds an fp16 value (or NaN / Inf)
  const uint32_t s = (f >> 16) & 0x8000u, E = (f >> 23) & 255, m = f & 0x7FFFFF;
  const uint32_t normal = ((E - 112) << 10) | (m >> 13), special = 0x7C00u | (m >> 13);
  // below fp16's emin (E < 113): |v| 2^24 is the subnormal's integer significand (0 for 0);
  // |v| capped at 1 keeps the conversion in range in the lanes that take another branch
  const uint32_t a = f & 0x7FFFFFFFu;
  const uint32_t sub = uint32_t(int32_t(f32_of(a < 0x3F800000u ? a : 0x3F800000u) * 0x1p24f));
  return s | sel_bits(E == 255, special, sel_bits(E >= 113, normal, sub));
}

constexpr int kW = 32;  // output columns per panel

// Vectors on 64-byte (cache line) boundaries: a panel row of 32 exponents (32 bytes) or
// values (128 bytes) never straddles two lines.  malloc's 16-byte alignment left it to
// chance: the same kernel ran about 10% slower over misaligned planes (4096 x 4096 x 1024,
// sm90 fp16).
template <class T>
struct LineAlloc {
  using value_type = T;
  LineAlloc() = default;
  template <class U>
  LineAlloc(const LineAlloc<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64))); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  template <class U>
  bool operator==(const LineAlloc<U>&) const { return true; }
};
template <class T>
using LineVec = std::vector<T, LineAlloc<T>>;

// A as value + int8 exponent planes (M, Kp); B as panels [NP][Kp][32].  Zero operands and
// rows/columns outside the window hold value 0 and exponent -128.  Multi-pass instructions
// store each instruction's k pass by pass (position p * L + q holds the pass's q-th k), so
// every pass is one contiguous chunk of L.
struct Planes {
  int64_t M = 0, N = 0, K = 0, Kp = 0, NP = 0, nblk = 0;
  LineVec<float> av, bv;
  LineVec<int8_t> ae, be;
  // E-FDPA only: exponents for the span check, minimum side (zero operands 127); ae / be hold
  // the maximum side (zero -128); exponents outside [-31, 31] are 100 / -100 (check fails)
  LineVec<int8_t> ae2, be2;
  LineVec<double> avd, bvd;  // E-FDPA only: the value planes in fp64 (no conversions in the loop)
  std::vector<uint8_t> row_ok, col_ok;
  // T/ST-FDPA with a Spec.zero_exp above the output's emin: per chunk of L plane positions
  // (nch = Kp / L; else 0), whether it holds a zero operand or padding (exponent -128): A rows
  // (M, nch), B panels as bits of their 32 columns (NP, nch); the kernel's emax takes
  // zero_exp there
  int64_t nch = 0;
  std::vector<uint8_t> az;
  std::vector<uint32_t> bz;
  std::vector<int32_t> kmap;  // multi-pass: plane position -> k (-1: padding)
  // GST-FDPA only: scale values sig * 2^(exp - mbits) and exponents, A as (M, nblk), B as
  // panels [NP][nblk][32]
  LineVec<double> sav, sbv;
  LineVec<int32_t> sae, sbe;
  uint32_t okmask(int64_t p) const {
    uint32_t m = 0;
    for (int l = 0; l < kW; ++l) m |= uint32_t(col_ok[size_t(p * kW + l)]) << l;
    return m;
  }
};

// The codes FdpaEngine::fill_direct writes into the planes itself: fp16, bf16 (2 bytes),
// tf32 / xf32 in fp32 words (the low 13 bits dropped, as decode() does), the fp8 formats
enum class PlaneCode : int { kFp16, kBf16, kTf32, kE4m3Fn, kE5m2, kE4m3Fnuz, kE5m2Fnuz };
constexpr int kNumPlaneCodes = 7;
constexpr int plane_code_bytes(PlaneCode c) {
  return c == PlaneCode::kTf32 ? 4 : c == PlaneCode::kFp16 || c == PlaneCode::kBf16 ? 2 : 1;
}
constexpr int kPlaneWindow = 31;  // the planes hold |decoded exponent (+ scale exponent)| <= 31

// Codes straight to the planes: a row of n codes (A's rows, B's columns) to n values and
// exponent bytes, and rows [k0, k1) of a row-major B (n columns, rows sk bytes apart) to the
// panels (pstride apart, kW lanes a row; row k to panel row pos[k], or k where pos is null).
// Each value is the code's (a zero's sign dropped), each byte its decoded exponent (-128 for
// a zero); nonzero when a code is a NaN / infinity or has a nonzero exponent outside the
// window (what was stored is then meaningless).
using DirectRow = uint8_t (*)(const uint8_t* c, int64_t n, float* v, int8_t* e);
using DirectPanels = uint8_t (*)(const uint8_t* b, int64_t sk, int64_t k0, int64_t k1, int64_t n,
                                 int64_t pstride, const int32_t* pos, float* v, int8_t* e);
struct DirectFill {
  DirectRow row = nullptr;
  DirectPanels panels = nullptr;
};

// Codes of a strided tensor view read in place: row r's code k at base + r * sr + k * sk
// (bytes), esize bytes each.
struct CodeRows {
  const uint8_t* base = nullptr;
  int64_t sr = 0, sk = 0;
  int esize = 0;
  uint64_t at(int64_t r, int64_t k) const {
    const uint8_t* p = base + r * sr + k * sk;
    uint64_t c = 0;
    std::memcpy(&c, p, size_t(esize));  // (little-endian: the code in the low bytes)
    return c;
  }
};

// The core's chunk, for the lanes the vector code hands back (out of line: cold).
struct Fallback {
  const Params* P;
  const Planes* pl;
  const Decoded* A;
  const Decoded* B;
  const Dec* SA;  // scale decodes (M | N, nblk) or null
  const Dec* SB;
  // planes filled from the codes (FdpaEngine::fill_direct): A / B hold no decoded rows, the
  // chunk decodes its own L codes of A's row and B's column from these
  CodeRows ca{}, cb{};
  // the chunk at plane position k0 from the accumulator acc (fp32 word; fp16 values too)
  uint32_t chunk(int64_t i, int64_t j, int64_t k0, uint32_t acc) const;
  // multi-pass c_join = "final": t + c in one IEEE addition of the output format
  uint32_t join(uint32_t t, uint32_t c) const;
};

// One kernel: chunks [kc0, kc1) (plane positions, on instruction boundaries) of rows
// [i0, i1) x panel p; acc: fp32 words, row stride ld.  Lanes of columns that are not ok are
// left as they were.
using PanelFn = void (*)(const Params&, const Planes&, const Fallback&, int64_t i0, int64_t i1,
                         int64_t p, int64_t kc0, int64_t kc1, uint32_t* acc, int64_t ld);
// The T / ST-FDPA kernel compiled with a chunk's shape fixed: the products per chunk (L), per
// int32 partial sum (G) and which optional steps run, each only where it can change a bit
// (`t_shape`).  Fixed, the term loop unrolls and the chunk code carries no option tests
// (docs/cpu_fast.md "Per core": 13-30% fewer cycles).  kTShapes lists those compiled: the
// registry's rows (tests/test_cpu_fast_native.py checks each lands on one); any other
// parameter vector runs the kernel that reads everything from Params.
struct TShape {
  int L = 0, G = 0;
  bool half = false, e8m13 = false;  // fp16 output (round to odd, RNE to fp16) / E8M13 accumulator
  bool zx = false;     // the planes carry per-chunk zero-operand masks (Spec.zero_exp)
  bool floor = false;  // Spec.emax_floor can move some lane's emax
  bool ovf = false;                  // c's term plus the chunk's sum can overflow int32
  bool zplus = false, cfinal = false;  // +0 for zero fp16 results / multi-pass, c added last
  // The output's emin is at least -96 (fp16): every lane's emax lies at or above F - 126 and
  // above every zero product's byte, so a plain maximum takes the products and only a
  // non-finite c can leave the range (t_shape)
  bool narrow = false;
  constexpr bool operator==(const TShape&) const = default;
};
TShape t_shape(const Params& P);
// whether the planes carry per-chunk zero masks (a zero_exp above the output's emin)
bool t_zero_masks(const Params& P);
bool t_narrow(const Params& P);  // TShape::narrow
inline constexpr TShape kTShapes[] = {
    // L, G, half, e8m13, zx, floor, ovf, zplus, cfinal, narrow
    {4, 4, false, false, false, false, false, false, false, false},    // sm70 fp16, sm80-sm89 tf32 -> fp32
    {4, 4, true, false, false, false, false, true, false, true},      // sm70 fp16 -> fp16
    {8, 8, false, false, false, false, false, false, false, false},    // sm75-sm89 fp16 / bf16, sm90+ tf32
    {8, 8, true, false, false, false, false, true, false, true},      // sm75-sm89 fp16 -> fp16
    {16, 16, false, true, false, false, false, false, false, false},   // sm89 fp8 -> fp32
    {16, 16, true, false, false, false, false, true, false, true},    // sm89 fp8 -> fp16
    {16, 16, false, false, false, false, true, false, false, false},   // sm90+ fp16 / bf16 -> fp32
    {16, 16, true, false, false, false, true, true, false, true},     // sm90+ fp16 -> fp16
    {16, 16, true, false, false, false, true, true, true, true},      // 2-pass fp8 -> fp16
    {16, 16, false, false, false, false, true, false, true, false},    // 2-pass fp8 -> fp32
    {32, 32, false, true, false, false, false, false, false, false},   // sm90 fp8 -> fp32
    {32, 32, true, false, false, false, false, true, false, true},    // sm90 fp8 -> fp16
    {32, 16, false, false, false, false, true, false, false, false},   // sm100 / sm120 fp8, ST -> fp32
    {32, 16, true, false, false, false, true, true, false, true},     // sm100 / sm120 fp8 -> fp16
};
constexpr int kNumTShapes = int(sizeof(kTShapes) / sizeof(kTShapes[0]));
int t_shape_index(const Params& P);  // in kTShapes, or -1

struct FdpaKernels {
  PanelFn t, tr, e, gst;
  const PanelFn* t_fixed;              // kNumTShapes kernels, one per kTShapes entry
  PanelFn (*fixed)(const Params&);     // TR / GTR, E, GST with L fixed (the registry's rows), or null
  DirectFill direct[kNumPlaneCodes];   // by PlaneCode; null: the plain loops of fdpa_engine.cpp
};
FdpaKernels fdpa_kernels_avx2();
FdpaKernels fdpa_kernels_avx512();
FdpaKernels fdpa_kernels_neon();
// the fill isa's engine uses for code c: its own, else the plain loops (never null)
DirectFill direct_fill(PlaneCode c, Isa isa);

// How the caller runs loops in parallel: body(lo, hi) over [0, n) in pieces of >= grain.
using ParFor = std::function<void(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body)>;
inline void serial_for(int64_t n, int64_t, const std::function<void(int64_t, int64_t)>& body) {
  if (n > 0) body(0, n);
}

// Multi-pass instructions: each k's plane position (passes.h pass_k inverted: pass p's q-th
// product of an instruction sits at p * L + q); the identity for one pass.
struct KPos {
  int64_t instr = 0;        // products per instruction (0: the identity)
  std::vector<int32_t> at;  // k % instr -> its position in the instruction
  bool on() const { return instr != 0; }
  // k's plane position
  int64_t pos(int64_t k) const { return instr ? k - k % instr + at[size_t(k % instr)] : k; }
  // f(t, the plane position of k0 + t) for t in [0, n): one division per instruction, not
  // per k
  template <class Fn>
  void each(int64_t k0, int64_t n, Fn f) const {
    if (!instr) {
      for (int64_t t = 0; t < n; ++t) f(t, k0 + t);
      return;
    }
    for (int64_t t = 0; t < n;) {
      const int64_t r = (k0 + t) % instr, base = k0 + t - r, m = std::min(n - t, instr - r);
      for (int64_t j = 0; j < m; ++j) f(t + j, base + at[size_t(r + j)]);
      t += m;
    }
  }
};

// The FDPA kernels over one K block: planes from decoded operands, then any chunk range.
class FdpaEngine {
 public:
  // false when isa / P has no vector kernel (nothing prepared)
  bool setup(const Params& P, Isa isa);
  // operands of K (a block), SA / SB: scale decodes (M | N, nblk) or null, fsa / fsb their
  // NaN flags.  The decoded operands must live as long as the engine runs.
  void build(const Decoded& A, const Decoded& B, const Dec* SA, const Dec* SB,
             const uint8_t* fsa, const uint8_t* fsb, int64_t nblk, int64_t M, int64_t N,
             int64_t K, const ParFor& par);
  // The planes of the common rows (no scales folded in but GST's, one exponent plane; a
  // multi-pass instruction's k in pass order) built while the operands are decoded, from
  // runs still in cache: begin() sizes them (false: this P / scales has none, build() does
  // everything); then fill_a / fill_b on every run
  // of k of every row of A and column of B just decoded (any threads, disjoint rows), and
  // build() with the same M, N, K finishes (flags, padding).
  bool begin(int64_t M, int64_t N, int64_t K, bool scales);
  void fill_a(const Decoded& A, int64_t i0, int64_t i1, int64_t k0, int64_t n);
  void fill_b(const Decoded& B, int64_t j0, int64_t j1, int64_t k0, int64_t n);
  // Or, after begin(), the codes (a: A's rows, b: B's columns, K codes each) straight into
  // those planes, with no
  // Decoded rows (A / B get zero row_flags, sized M / N; build() takes them as usual and the
  // hand-backs decode their own codes): true when every row and column is finite and inside
  // the window and the engine can (single-pass plain rows, A's rows contiguous along k, B's
  // columns adjacent or contiguous along k); false: call begin() again and decode as usual
  bool fill_direct(const CodeRows& a, PlaneCode a_code, const CodeRows& b, PlaneCode b_code,
                   int64_t M, int64_t N, int64_t K, Decoded& A, Decoded& B, const ParFor& par);
  int64_t width() const { return pl_.NP * kW; }
  // bytes of one column panel's planes (what the kernel reads of B)
  int64_t panel_bytes() const {
    const size_t lane = sizeof(float) + 1 + (pl_.be2.empty() ? 0 : 1) + (pl_.bvd.empty() ? 0 : sizeof(double));
    return pl_.Kp * kW * int64_t(lane);
  }
  // whether setup() chose a kernel compiled for this shape (kTShapes; TR / GTR, E, GST:
  // panel_fixed in kern/tables.inc)
  bool fixed_shape() const { return fixed_; }
  bool row_ok(int64_t i) const { return pl_.row_ok[size_t(i)] != 0; }
  bool col_ok(int64_t j) const { return pl_.col_ok[size_t(j)] != 0; }
  const Planes& planes() const { return pl_; }
  // acc rows [i0, i1) (stride ld, fp32 words) over the products [k0, k1) (k0 on an
  // instruction boundary); lanes with !row_ok || !col_ok are left as they were
  void run(int64_t i0, int64_t i1, int64_t k0, int64_t k1, uint32_t* acc, int64_t ld) const {
    run(i0, i1, k0, k1, acc, ld, 0, pl_.NP);
  }
  // the same over the column panels [p0, p1) only (columns [p0 * kW, p1 * kW))
  void run(int64_t i0, int64_t i1, int64_t k0, int64_t k1, uint32_t* acc, int64_t ld,
           int64_t p0, int64_t p1) const;

 private:
  Params P_{};
  FastKind kind_ = FastKind::kNone;
  PanelFn fn_ = nullptr;
  Planes pl_;
  Fallback fb_{};
  bool fixed_ = false;
  KPos kpos_;
  bool filled_ = false;  // begin() was called: fill_a / fill_b write the planes
  bool direct_ = false;  // fill_direct() filled them: the hand-backs read ca_ / cb_
  DirectFill fill_[kNumPlaneCodes];  // direct_fill() of setup()'s isa, by PlaneCode
  CodeRows ca_{}, cb_{};
  bool plain(bool scales) const;
  void size_planes(int64_t M, int64_t N, int64_t K, bool init);
};

}  // namespace mma
