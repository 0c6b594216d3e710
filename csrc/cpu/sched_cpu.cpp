// CPU kernel of mma_emu::_sched.  Two ways to run a program:
//
// - row blocks (run_blocks): straight-line fp32-workspace programs, i.e. split-K / promotion
//   reductions and epilogues (no NODE).  Each stack entry is a block of 16 output rows; every
//   op is one loop over the block (vectorised; -ffp-contract=off keeps mul and add apart), the
//   same IEEE fp32 operations in the same order as the per-element interpreter.  CHAIN ops run
//   their slice or promotion block straight into a stack entry: through the vectorised FDPA
//   kernels (FdpaPanels) where the arch has one, else through the core chain per element.  No
//   partial tensors, no gather: a split-K or promoted product costs about one plain chain.
// - per element (core/schedule.h): everything else (FPRev trees, fp64 workspace or output).
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <type_traits>
#include <vector>

#include "../sched.h"
#include "decoded.h"
#include "fast_paths.h"
#include "fpenv.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(MMA_EMU_NO_SIMD)
#include <immintrin.h>
#endif

namespace mma {

namespace {
int64_t op_size(const int64_t* prog, int64_t pc) {
  switch (prog[pc]) {
    case kSPartial: return 2;
    case kSNode: return 4 + 2 * prog[pc + 1];
    case kSChain: case kSChains: return 4;
    default: return 1;
  }
}

// Largest stack depth of a program without NODE ops.
int stack_depth(const int64_t* prog, int64_t len) {
  int sp = 0, depth = 0;
  for (int64_t pc = 0; pc < len; pc += op_size(prog, pc)) {
    const int64_t op = prog[pc];
    if (op == kSPartial || op == kSC || op == kSZero || (op == kSChain && prog[pc + 3] != 2))
      ++sp;  // CHAIN ... 2 goes on in the top entry
    else if (op == kSAdd) --sp;
    depth = std::max(depth, op == kSChains ? sp + 1 : sp);  // CHAINS: one chain at a time
  }
  return depth;
}
}  // namespace

bool sched_has_chain(const int64_t* prog, int64_t len) {
  for (int64_t pc = 0; pc < len; pc += op_size(prog, pc))
    if (prog[pc] == kSChain || prog[pc] == kSChains) return true;
  return false;
}

// A program whose chains run only streamed: a CHAIN going on from the top entry (flag 2),
// or one starting off the instruction grid or ending off its own grid before K (a CUTLASS
// residue tile): run_streamed gives such a chain a window of its own from its start (and,
// for a ragged end, up to that end, so its short last group is zero-padded).
static bool sched_irregular(const Params& P, const int64_t* prog, int64_t len, int64_t K) {
  for (int64_t pc = 0; pc < len; pc += op_size(prog, pc))
    if (prog[pc] == kSChain && (prog[pc + 3] == 2 || prog[pc + 1] % P.L != 0 ||
                                ((prog[pc + 2] - prog[pc + 1]) % P.L != 0 && prog[pc + 2] != K)))
      return true;
  return false;
}

bool sched_rowwise(const Params& P, const SchedConsts& S, const int64_t* prog, int64_t len) {
  (void)S;  // fp32 and fp64 workspaces both run row-wise
  if (!(P.rho == kRzFp32 || P.rho == kRzE8m13 || P.rho == kRneFp32 || P.rho == kRneFp16 ||
        P.rho == kRneFp64))
    return false;
  for (int64_t pc = 0; pc < len; pc += op_size(prog, pc))
    if (prog[pc] == kSNode) return false;
  return stack_depth(prog, len) <= kSchedStack;
}

namespace {

// Output rows per block: the FDPA kernels' row block; the FMA / FTZ kernels' (register
// blocks of 6 rows).
inline int64_t block_rows(const Params& P) { return (P.op == kFma || P.op == kFtzAddMul) ? 24 : 16; }

// The element-wise ops of a row block (workspace T = float or double), compiled twice: for
// AVX2 + FMA + F16C (std::fma becomes vfmadd, fp16 outputs use vcvtps2ph) and for baseline
// x86-64 (std::fma is a libm call).  Same IEEE operations either way; -ffp-contract=off keeps
// a * b + c two roundings.
#define MMA_ROW_OPS_T(T)                                                                   \
  void add(T* x, const T* y, int64_t n) {                                                  \
    for (int64_t e = 0; e < n; ++e) x[e] = x[e] + y[e];                                    \
  }                                                                                        \
  void mul(T* x, T alpha, int64_t n) {                                                     \
    for (int64_t e = 0; e < n; ++e) x[e] = alpha * x[e];                                   \
  }                                                                                        \
  void fma(T* x, const T* c, T alpha, T beta, int64_t n) {                                 \
    for (int64_t e = 0; e < n; ++e) x[e] = std::fma(alpha, x[e], beta * c[e]);             \
  }                                                                                        \
  void mul_add(T* x, const T* c, T alpha, T beta, int64_t n) {                             \
    for (int64_t e = 0; e < n; ++e) {                                                      \
      const T ax = alpha * x[e], bc = beta * c[e];                                         \
      x[e] = ax + bc;                                                                      \
    }                                                                                      \
  }
// One rounding of the workspace value to the output format (nearest even; NaN: the arch's)
#define MMA_ROW_OUT                                                                        \
  void out(const Params& P, const float* v, uint8_t* o, int oes, int64_t n) {              \
    if (oes == 2) return out_f16(P, v, reinterpret_cast<uint16_t*>(o), n);                 \
    uint32_t* q = reinterpret_cast<uint32_t*>(o);                                          \
    for (int64_t j = 0; j < n; ++j) q[j] = is_nan(v[j]) ? uint32_t(P.nan_bits) : bits_of(v[j]); \
  }                                                                                        \
  void out(const Params& P, const double* v, uint8_t* o, int oes, int64_t n) {             \
    if (oes == 8) {                                                                        \
      uint64_t* q = reinterpret_cast<uint64_t*>(o);                                        \
      for (int64_t j = 0; j < n; ++j) q[j] = is_nan(v[j]) ? P.nan_bits : bits_of(v[j]);    \
    } else if (oes == 4) {                                                                 \
      uint32_t* q = reinterpret_cast<uint32_t*>(o);                                        \
      for (int64_t j = 0; j < n; ++j)                                                      \
        q[j] = is_nan(v[j]) ? uint32_t(P.nan_bits) : bits_of(static_cast<float>(v[j]));    \
    } else {                                                                               \
      uint16_t* q = reinterpret_cast<uint16_t*>(o);                                        \
      for (int64_t j = 0; j < n; ++j) q[j] = uint16_t(out_bits_rne(P, v[j]));              \
    }                                                                                      \
  }

struct RowOps {
  MMA_ROW_OPS_T(float)
  MMA_ROW_OPS_T(double)
  MMA_ROW_OUT
  void out_f16(const Params& P, const float* v, uint16_t* o, int64_t n) {
    for (int64_t j = 0; j < n; ++j) o[j] = uint16_t(out_bits_rne(P, double(v[j])));
  }
};

#if defined(__x86_64__) && defined(__GNUC__) && !defined(MMA_EMU_NO_SIMD)
#define MMA_HAVE_V3 1
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
struct RowOpsV3 {
  MMA_ROW_OPS_T(float)
  MMA_ROW_OPS_T(double)
  MMA_ROW_OUT
  void out_f16(const Params& P, const float* v, uint16_t* o, int64_t n) {
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)  // IEEE round to nearest even, subnormals and overflow included
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + j),
                       _mm256_cvtps_ph(_mm256_loadu_ps(v + j), _MM_FROUND_TO_NEAREST_INT));
    for (; j < n; ++j) o[j] = uint16_t(out_bits_rne(P, double(v[j])));
    for (j = 0; j < n; ++j)
      if (is_nan(v[j])) o[j] = uint16_t(P.nan_bits);
  }
};
#pragma GCC pop_options
#endif
#undef MMA_ROW_OPS_T
#undef MMA_ROW_OUT

// Output-format bits -> the values the row blocks hold (fp16 values are exact in fp32,
// fp32 and fp16 ones in fp64).
inline float val_of(bool half, uint64_t bits) {
  return f32_of(half ? f32_bits_of_f16(uint32_t(bits)) : uint32_t(bits));
}

// What one call runs: the program, its operands, and (for CHAIN) the decoded batch element.
struct Blocks {
  const Params& P;
  const SchedConsts& S;
  const int64_t* prog;
  int64_t len;
  View3 vc, vp;
  int64_t Bt, M, N, K;
  int depth;
  int64_t rows;  // output rows per block
  bool half;
  bool f64;   // fp64 output (the FMA chain in fp64)
  int oes;    // output element size
  uint8_t* out;
  bool v3;  // AVX2 + FMA + F16C element-wise ops (cpu_isa() is not scalar)

  template <class T> T val(uint64_t bits) const {
    return f64 ? T(f64_of(bits)) : T(val_of(half, bits));
  }
};

// The operands of one batch element for its CHAIN ops over a window [w0, w0 + Kw) of K:
// codes decoded for the fused ops, fp32 / fp64 values (M, Kw) and (N, Kw) for the FMA chain
// and FTZ-AddMul.  The window is all of K when it fits the block budget, else a K block of
// it (run_streamed).
struct ChainSrc {
  bool values = false;
  Decoded A, B;
  std::vector<Dec> SA, SB;          // block-scaled ops: scale decodes (M | N, nblk)
  std::vector<uint8_t> fsa, fsb;    // ... and their NaN / Inf flags per row / column
  int64_t nblk = 0;
  FdpaPanels fp;
  Tensor Av, Bv;
  ValuePanels vp;
  bool fast = false;
  std::vector<int64_t> bad_cols;  // columns the FDPA kernels hand to the core
  int64_t W = 0;                  // row stride of the stack entries
  int64_t w0 = 0, Kw = 0;         // the window of K held
  bool holds(int64_t k0, int64_t k1) const { return w0 <= k0 && k1 <= w0 + Kw; }
};

// Decodes (packs) products [w0, w0 + len) of batch element bi.  w0 lies on the instruction
// grid (and on a scale block), so the chains inside start on it too.
void prepare_window(const Blocks& X, const Tensor& a, const Tensor& b, const View3& va,
                    const View3& vbt, const View3* vs, int64_t bi, int64_t w0, int64_t len,
                    ChainSrc& cs) {
  cs.values = X.P.op == kFma || X.P.op == kFtzAddMul;
  cs.bad_cols.clear();
  cs.w0 = w0;
  cs.Kw = len;
  if (cs.values) {
    Tensor ab = torch::stable::select(a, 0, bi), bb = torch::stable::select(b, 0, bi);
    const Tensor aw = torch::stable::narrow(ab, 1, w0, len);
    const Tensor bw = torch::stable::narrow(bb, 0, w0, len);
    cs.fast = cs.vp.prepare(X.P, aw, bw);
    cs.Av = cs.Bv = Tensor();  // the previous window's copies go first
    if (!cs.fast) {
      cs.Av = torch::stable::contiguous(aw);
      cs.Bv = torch::stable::contiguous(torch::stable::transpose(bw, 0, 1));
    }
    cs.W = cs.fast ? cs.vp.width() : X.N;
    return;
  }
  decode_rows(va, bi, X.M, w0, len, false, X.P.fa, cs.A);
  decode_rows(vbt, bi, X.N, w0, len, false, X.P.fb, cs.B);
  const bool scaled = vs != nullptr;
  if (scaled) {
    const int64_t b0 = w0 / X.P.block;
    cs.nblk = (w0 + len + X.P.block - 1) / X.P.block - b0;
    decode_scales(vs[0], bi, X.M, b0, cs.nblk, false, X.P.fs, cs.SA, cs.fsa);
    decode_scales(vs[1], bi, X.N, b0, cs.nblk, true, X.P.fs, cs.SB, cs.fsb);
  }
  cs.fast = cs.fp.prepare(X.P, cs.A, cs.B, scaled ? cs.SA.data() : nullptr,
                          scaled ? cs.SB.data() : nullptr, scaled ? cs.fsa.data() : nullptr,
                          scaled ? cs.fsb.data() : nullptr, cs.nblk, X.M, X.N, len);
  cs.W = cs.fast ? cs.fp.width() : X.N;
  if (cs.fast)
    for (int64_t j = 0; j < X.N; ++j)
      if (!cs.fp.col_ok(j)) cs.bad_cols.push_back(j);
}

// A chain's starting accumulators in the stack entry t (rows i0..i1): C or +0, padding +0.
template <class T>
void start_chain(const Blocks& X, int64_t bi, int64_t i0, int64_t i1, int64_t W, bool from_c,
                 T* t) {
  for (int64_t i = i0; i < i1; ++i) {
    T* row = t + (i - i0) * W;
    for (int64_t j = 0; j < X.N; ++j) row[j] = from_c ? X.val<T>(X.vc.at(bi, i, j)) : T(0);
    for (int64_t j = X.N; j < W; ++j) row[j] = T(0);
  }
}

// Advances the FMA / FTZ-AddMul chains in t over [k0, k1) (inside the window): the vector
// kernel where it serves (exact in every lane), else the core per output.
template <class T>
void value_chain(const Blocks& X, const ChainSrc& cs, int64_t i0, int64_t i1, int64_t k0,
                 int64_t k1, T* t) {
  const int64_t W = cs.W, r0 = k0 - cs.w0, n = k1 - k0;
  if (cs.fast) {
    cs.vp.run(i0, i1, r0, r0 + n, t, W);
    return;
  }
  const T* av = cs.Av.const_data_ptr<T>();
  const T* bv = cs.Bv.const_data_ptr<T>();
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t j = 0; j < X.N; ++j) {
      const T* x = av + i * cs.Kw + r0;
      const T* y = bv + j * cs.Kw + r0;
      T& r = t[(i - i0) * W + j];
      if constexpr (std::is_same_v<T, float>) {
        r = X.P.op == kFma ? dot_fma<float>(X.P, x, y, int(n), r) : dot_ftz(X.P, x, y, int(n), r);
      } else {  // fp64 values: FMA chains only
        r = dot_fma<T>(X.P, x, y, int(n), r);
      }
    }
}

// Advances the chains in t (rows i0..i1, output-format values: the fast kernels' fp32 words)
// over products [k0, k1) inside the window, k0 on the chain's instruction grid: the chain
// goes on from t as the plain path's K blocks go on from their accumulators.
void run_chain(const Blocks& X, const ChainSrc& cs, int64_t i0, int64_t i1, int64_t k0,
               int64_t k1, float* t) {
  const int64_t W = cs.W;
  if (cs.values) {
    value_chain(X, cs, i0, i1, k0, k1, t);
    return;
  }
  // block-scaled: the range starts on a scale block (checked), so the chain's scales are
  // those from block r0 / block of the window on
  const bool scaled = cs.nblk > 0;
  const int64_t r0 = k0 - cs.w0, n = k1 - k0;
  const int64_t kb = scaled ? r0 / X.P.block : 0;
  uint32_t* acc = reinterpret_cast<uint32_t*>(t);
  auto core = [&](int64_t i, int64_t j) {
    uint32_t& w = acc[(i - i0) * W + j];
    const bool special = (cs.A.row_flags[size_t(i)] | cs.B.row_flags[size_t(j)] |
                          (scaled ? cs.fsa[size_t(i)] | cs.fsb[size_t(j)] : 0)) != 0;
    const uint64_t r = dot_fused(X.P, cs.A.row(i, cs.Kw).shifted(int(r0)),
                                 cs.B.row(j, cs.Kw).shifted(int(r0)), int(n),
                                 X.half ? f16_bits_of_f32(w) : w,
                                 scaled ? cs.SA.data() + i * cs.nblk + kb : nullptr,
                                 scaled ? cs.SB.data() + j * cs.nblk + kb : nullptr, special);
    w = X.half ? f32_bits_of_f16(uint32_t(r)) : uint32_t(r);
  };
  if (cs.fast) {
    cs.fp.run(i0, i1, r0, r0 + n, acc, W);
    for (int64_t i = i0; i < i1; ++i) {  // NaN / Inf / out-of-window operands: the core
      if (!cs.fp.row_ok(i)) {
        for (int64_t j = 0; j < X.N; ++j) core(i, j);
      } else {
        for (const int64_t j : cs.bad_cols) core(i, j);
      }
    }
    return;
  }
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t j = 0; j < X.N; ++j) core(i, j);
}

// The fp64 FMA chains in t over [k0, k1) (fp64 outputs).
void run_chain(const Blocks& X, const ChainSrc& cs, int64_t i0, int64_t i1, int64_t k0,
               int64_t k1, double* t) {
  value_chain(X, cs, i0, i1, k0, k1, t);
}

// A CHAIN into a stack entry of workspace type T, its whole range inside the window: fp32 /
// fp16 chains run in a float scratch entry and widen exactly into an fp64 workspace.
template <class T>
void chain_into(const Blocks& X, const ChainSrc& cs, int64_t bi, int64_t i0, int64_t i1,
                const int64_t* op, T* t, float* scratch) {
  const bool from_c = op[3] != 0;
  if (sizeof(T) == 4 || X.f64) {
    start_chain(X, bi, i0, i1, cs.W, from_c, t);
    run_chain(X, cs, i0, i1, op[1], op[2], t);
  } else {
    start_chain(X, bi, i0, i1, cs.W, from_c, scratch);
    run_chain(X, cs, i0, i1, op[1], op[2], scratch);
    const int64_t n = (i1 - i0) * cs.W;
    for (int64_t e = 0; e < n; ++e) t[e] = double(scratch[e]);
  }
}

// Rows [i0, i1) of batch element bi in workspace T (float: fp32, double: fp64).  buf:
// (depth + 1) entries of X.rows x W values (the last one holds C); scratch: one float entry
// (CHAINs of fp32 / fp16 outputs in an fp64 workspace).
template <class Ops, class T>
void run_block(const Blocks& X, const ChainSrc* cs, int64_t bi, int64_t i0, int64_t i1,
               int64_t W, T* buf, float* scratch) {
  Ops ops;
  // fp32 workspace: alpha and beta rounded to fp32 first (ws_mul / ws_fma of schedule.h)
  const T alpha = T(X.S.alpha), beta = T(X.S.beta);
  const int64_t n = (i1 - i0) * W;  // the ops run over whole blocks, padding included
  auto entry = [&](int d) { return buf + size_t(d) * size_t(X.rows * W); };
  T* cb = entry(X.depth);
  bool have_c = false;
  auto load_c = [&]() {
    if (!have_c)
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = 0; j < W; ++j)
          cb[(i - i0) * W + j] = j < X.N ? X.val<T>(X.vc.at(bi, i, j)) : T(0);
    have_c = true;
    return cb;
  };
  int sp = 0;
  for (int64_t pc = 0; pc < X.len; pc += op_size(X.prog, pc)) {
    const int64_t* op = X.prog + pc;
    switch (op[0]) {
      case kSChain: chain_into(X, *cs, bi, i0, i1, op, entry(sp++), scratch); break;
      case kSChains:  // top += each block's chain from +0, in order
        for (int64_t k = op[1]; k < op[2]; k += op[3]) {
          const int64_t one[4] = {kSChain, k, std::min(op[2], k + op[3]), 0};
          chain_into(X, *cs, bi, i0, i1, one, entry(sp), scratch);
          ops.add(entry(sp - 1), entry(sp), n);
        }
        break;
      case kSPartial: {
        T* t = entry(sp++);
        for (int64_t i = i0; i < i1; ++i)
          for (int64_t j = 0; j < W; ++j)
            t[(i - i0) * W + j] = j < X.N ? X.val<T>(X.vp.at(op[1] * X.Bt + bi, i, j)) : T(0);
        break;
      }
      case kSC: std::copy(load_c(), load_c() + n, entry(sp++)); break;
      case kSZero: std::fill(entry(sp), entry(sp) + n, T(0)); ++sp; break;
      case kSAdd: ops.add(entry(sp - 2), entry(sp - 1), n); --sp; break;
      case kSEpiAlpha: ops.mul(entry(sp - 1), alpha, n); break;
      case kSEpiFma: ops.fma(entry(sp - 1), load_c(), alpha, beta, n); break;
      default: ops.mul_add(entry(sp - 1), load_c(), alpha, beta, n); break;  // kSEpiMulAdd
    }
  }
  const T* t = entry(0);
  for (int64_t i = i0; i < i1; ++i)
    ops.out(X.P, t + (i - i0) * W, X.out + (bi * X.M + i) * X.N * X.oes, X.oes, X.N);
}

// run_block with the widest element-wise ops this CPU has.
template <class T>
void run_block_any(const Blocks& X, const ChainSrc* cs, int64_t bi, int64_t i0, int64_t i1,
                   int64_t W, T* buf, float* scratch) {
#ifdef MMA_HAVE_V3
  if (X.v3) return run_block<RowOpsV3>(X, cs, bi, i0, i1, W, buf, scratch);
#endif
  run_block<RowOps>(X, cs, bi, i0, i1, W, buf, scratch);
}

// ---- K windows -----------------------------------------------------------------------
// Products per window and the grid the windows and chain pieces keep to: a chain goes on
// from its accumulators at a multiple of the instruction (all passes of it) and of the scale
// block counted from its own start, as the plain path's K blocks do.
struct Window {
  int64_t len, align;
};
Window window_of(const Blocks& X, bool scaled) {
  const Params& P = X.P;
  int64_t align = int64_t(P.L) * std::max<int64_t>(P.passes, 1);
  if (P.op == kFtzAddMul) align = std::lcm<int64_t>(align, P.P);
  if (scaled) align = std::lcm<int64_t>(align, P.block);
  const int64_t M = X.M, Np = X.N + kW;  // kW: the widest panel padding
  int64_t per_k;
  if (P.op == kFma || P.op == kFtzAddMul) {
    per_k = int64_t(P.rho == kRneFp64 ? 8 : 4) * (M + Np);
  } else {
    per_k = (M + X.N) * 9 + (M + Np) * 5;
    if (scaled) per_k += (M + X.N) * int64_t(sizeof(Dec) + 1) / P.block + 1;
  }
  const int64_t len = std::max<int64_t>(1, block_bytes() / std::max<int64_t>(per_k, 1) / align) * align;
  return {len, align};
}

// Buffers of the streamed evaluation (kept between calls on this thread).
template <class T>
struct StreamBufs {
  std::vector<T> stack;
  std::vector<float> scratch;
};

// One batch element when K does not fit one window: the program runs op by op over all rows
// (stack entries of M x W values, like the plain path's accumulators), and each CHAIN runs
// piece by piece over the windows it crosses, its accumulators going on from piece to
// piece.  The same IEEE operations in the same order per output as run_block.
template <class Ops, class T>
void run_streamed(const Blocks& X, const Tensor& a, const Tensor& b, const View3& va,
                  const View3& vbt, const View3* vs, int64_t bi, const Window& win,
                  ChainSrc& cs, StreamBufs<T>& sb) {
  Ops ops;
  auto prepare = [&](int64_t w0, int64_t end) {
    prepare_window(X, a, b, va, vbt, vs, bi, w0, std::min(win.len, end - w0), cs);
  };
  prepare(0, X.K);
  const int64_t W = cs.W, M = X.M, R = X.rows, nrb = (M + R - 1) / R, n_all = M * W;
  const bool narrow = sizeof(T) == 8 && !X.f64;  // fp32 / fp16 chains in an fp64 workspace
  sb.stack.resize(size_t(X.depth + 1) * size_t(n_all));
  if (narrow) sb.scratch.resize(size_t(n_all));
  auto entry = [&](int d) { return sb.stack.data() + size_t(d) * size_t(n_all); };
  // body(i0, i1) over row blocks, in parallel, in the IEEE environment
  auto rows = [&](const std::function<void(int64_t, int64_t)>& body) {
    parallel_for(0, nrb, grain_for(R * W * std::min(win.len, X.K)), [&](int64_t lo, int64_t hi) {
      FpEnvGuard guard;
      for (int64_t rb = lo; rb < hi && !interrupted(); ++rb) {
        body(rb * R, std::min(M, (rb + 1) * R));
        check_interrupt_main();
      }
    });
  };
  const T alpha = T(X.S.alpha), beta = T(X.S.beta);
  T* cb = entry(X.depth);
  bool have_c = false;
  auto load_c = [&]() {
    if (!have_c)
      rows([&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i)
          for (int64_t j = 0; j < W; ++j)
            cb[i * W + j] = j < X.N ? X.val<T>(X.vc.at(bi, i, j)) : T(0);
      });
    have_c = true;
    return cb;
  };
  auto chain = [&](const int64_t* op, auto* acc) {
    if (op[3] != 2)  // flag 2: the chain goes on from the accumulators in acc
      rows([&](int64_t i0, int64_t i1) { start_chain(X, bi, i0, i1, W, op[3] != 0, acc + i0 * W); });
    // a chain ending off its own grid before K takes windows ending at its end, so its
    // short last group is zero-padded (the instruction's first lanes, as a residue tile's)
    const int64_t end = (op[2] - op[1]) % X.P.L == 0 || op[2] == X.K ? X.K : op[2];
    for (int64_t p = op[1], k1 = op[2]; p < k1 && !interrupted();) {
      // the window serves when it holds p on its own instruction grid (groups are counted
      // from the window's start) and ends by `end`
      const bool serves = cs.holds(p, p) && p < cs.w0 + cs.Kw && (p - cs.w0) % X.P.L == 0 &&
                          cs.w0 + cs.Kw <= end;
      int64_t avail = serves ? cs.w0 + cs.Kw - p : 0;
      if (k1 - p > avail && avail < win.align) {  // not even one step left here: next window
        prepare(p, end);
        STD_TORCH_CHECK(cs.W == W, "_sched: window width changed");
        avail = cs.Kw;
      }
      const int64_t q = k1 - p <= avail ? k1 : p + avail / win.align * win.align;
      rows([&](int64_t i0, int64_t i1) { run_chain(X, cs, i0, i1, p, q, acc + i0 * W); });
      p = q;
    }
  };
  auto chain_to = [&](const int64_t* op, T* t) {  // a CHAIN into the stack entry t
    if (!narrow) return chain(op, t);
    float* f = sb.scratch.data();
    if (op[3] == 2)  // going on from t: its values are the chain's own (exact in fp32)
      rows([&](int64_t i0, int64_t i1) {
        for (int64_t e = i0 * W; e < i1 * W; ++e) f[e] = float(t[e]);
      });
    chain(op, f);
    rows([&](int64_t i0, int64_t i1) {
      for (int64_t e = i0 * W; e < i1 * W; ++e) t[e] = double(f[e]);
    });
  };
  int sp = 0;
  for (int64_t pc = 0; pc < X.len && !interrupted(); pc += op_size(X.prog, pc)) {
    const int64_t* op = X.prog + pc;
    switch (op[0]) {
      case kSChain:
        if (op[3] == 2) chain_to(op, entry(sp - 1));
        else chain_to(op, entry(sp++));
        break;
      case kSChains:  // top += each block's chain from +0, in order
        for (int64_t k = op[1]; k < op[2] && !interrupted(); k += op[3]) {
          const int64_t one[4] = {kSChain, k, std::min(op[2], k + op[3]), 0};
          T *x = entry(sp - 1), *y = entry(sp);
          chain_to(one, y);
          rows([&](int64_t i0, int64_t i1) { ops.add(x + i0 * W, y + i0 * W, (i1 - i0) * W); });
        }
        break;
      case kSPartial: {
        T* t = entry(sp++);
        rows([&](int64_t i0, int64_t i1) {
          for (int64_t i = i0; i < i1; ++i)
            for (int64_t j = 0; j < W; ++j)
              t[i * W + j] = j < X.N ? X.val<T>(X.vp.at(op[1] * X.Bt + bi, i, j)) : T(0);
        });
        break;
      }
      case kSC: {
        const T* c = load_c();
        std::copy(c, c + n_all, entry(sp++));
        break;
      }
      case kSZero: std::fill(entry(sp), entry(sp) + n_all, T(0)); ++sp; break;
      case kSAdd: {
        T *x = entry(sp - 2), *y = entry(sp - 1);
        rows([&](int64_t i0, int64_t i1) { ops.add(x + i0 * W, y + i0 * W, (i1 - i0) * W); });
        --sp;
        break;
      }
      default: {  // the epilogues
        T* x = entry(sp - 1);
        const T* c = op[0] == kSEpiAlpha ? nullptr : load_c();
        rows([&](int64_t i0, int64_t i1) {
          const int64_t n = (i1 - i0) * W;
          if (op[0] == kSEpiAlpha) ops.mul(x + i0 * W, alpha, n);
          else if (op[0] == kSEpiFma) ops.fma(x + i0 * W, c + i0 * W, alpha, beta, n);
          else ops.mul_add(x + i0 * W, c + i0 * W, alpha, beta, n);
        });
      }
    }
  }
  if (interrupted()) return;
  const T* t = entry(0);
  rows([&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      ops.out(X.P, t + i * W, X.out + (bi * M + i) * X.N * X.oes, X.oes, X.N);
  });
}

template <class T>
void run_streamed_any(const Blocks& X, const Tensor& a, const Tensor& b,
                      const View3& va, const View3& vbt, const View3* vs, int64_t bi,
                      const Window& win, ChainSrc& cs, StreamBufs<T>& sb) {
#ifdef MMA_HAVE_V3
  if (X.v3) return run_streamed<RowOpsV3, T>(X, a, b, va, vbt, vs, bi, win, cs, sb);
#endif
  run_streamed<RowOps, T>(X, a, b, va, vbt, vs, bi, win, cs, sb);
}

template <class T>
void run_blocks(const Blocks& X, const Tensor& a, const Tensor& b, const OptTensor& sa,
                const OptTensor& sb) {
  const bool chains = sched_has_chain(X.prog, X.len);
  const int64_t R = X.rows, nrb = (X.M + R - 1) / R;
  struct Bufs {
    std::vector<T> stack;
    std::vector<float> scratch;
  };
  auto block_buf = [&](int64_t W) {
    thread_local Bufs b;
    b.stack.resize(size_t(X.depth + 1) * size_t(R * W));
    if (sizeof(T) == 8 && !X.f64) b.scratch.resize(size_t(R * W));
    return &b;
  };
  if (!chains) {  // partials only: every (batch, row block) is independent
    parallel_for(0, X.Bt * nrb, grain_for(R * X.N * X.len), [&](int64_t lo, int64_t hi) {
      FpEnvGuard guard;
      Bufs* buf = block_buf(X.N);
      for (int64_t t = lo; t < hi && !interrupted(); ++t) {
        const int64_t bi = t / nrb, i0 = (t % nrb) * R;
        run_block_any(X, nullptr, bi, i0, std::min(X.M, i0 + R), X.N, buf->stack.data(),
                      buf->scratch.data());
        check_interrupt_main();
      }
    });
    return;
  }
  // B^T made contiguous first: decoding it row by row then reads memory in order
  const bool values = X.P.op == kFma || X.P.op == kFtzAddMul;
  const Tensor bt = values ? b : torch::stable::contiguous(torch::stable::transpose(b, 1, 2));
  const View3 va = view3(a), vbt = view3(bt);
  View3 vs[2];
  if (sa.has_value()) { vs[0] = view3(*sa); vs[1] = view3(*sb); }
  const View3* vsp = sa.has_value() ? vs : nullptr;
  const Window win = window_of(X, sa.has_value());
  if (win.len < X.K || sched_irregular(X.P, X.prog, X.len, X.K)) {
    // K in windows (bounded working memory), batch elements in turn
    ChainSrc cs;
    StreamBufs<T> bufs;
    for (int64_t bi = 0; bi < X.Bt && !interrupted(); ++bi)
      run_streamed_any(X, a, b, va, vbt, vsp, bi, win, cs, bufs);
    return;
  }
  // K fits one window: each row block runs the whole program in cache
  auto one_batch = [&](int64_t bi, ChainSrc& cs, bool inner_parallel) {
    prepare_window(X, a, b, va, vbt, vsp, bi, 0, X.K, cs);
    auto blocks = [&](int64_t lo, int64_t hi) {
      FpEnvGuard guard;  // the core chains and the reductions round to nearest
      Bufs* buf = block_buf(cs.W);
      for (int64_t rb = lo; rb < hi && !interrupted(); ++rb) {
        run_block_any(X, &cs, bi, rb * R, std::min(X.M, (rb + 1) * R), cs.W, buf->stack.data(),
                      buf->scratch.data());
        check_interrupt_main();
      }
    };
    if (inner_parallel) parallel_for(0, nrb, grain_for(R * cs.W * std::max<int64_t>(X.K, 1)), blocks);
    else blocks(0, nrb);
  };
  const int64_t work = X.M * X.N * std::max<int64_t>(X.K, 1);
  if (X.Bt > 1 && work < (1 << 16)) {  // many small products: parallel over the batch
    parallel_for(0, X.Bt, grain_for(work), [&](int64_t lo, int64_t hi) {
      ChainSrc cs;
      for (int64_t bi = lo; bi < hi && !interrupted(); ++bi) one_batch(bi, cs, false);
    });
  } else {
    ChainSrc cs;
    for (int64_t bi = 0; bi < X.Bt && !interrupted(); ++bi) one_batch(bi, cs, true);
  }
}

}  // namespace

Tensor sched_cpu(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& partials,
                 const OptTensor& sa, const OptTensor& sb, const Params& P,
                 const Tensor& program, const SchedConsts& S) {
  const int64_t Bt = c.size(0), M = c.size(1), N = c.size(2);
  Tensor out = torch::stable::new_empty(c, {Bt, M, N}, sched_out_dtype(P));
  if (out.numel() == 0) return out;
  const View3 va = view3(a), vb = view3(b), vc = view3(c), vp = view3(partials);
  const int64_t* prog = program.const_data_ptr<int64_t>();
  const int64_t len = program.numel();
  const int oes = int(out.element_size());
  uint8_t* obase = static_cast<uint8_t*>(out.data_ptr());
  if (sched_rowwise(P, S, prog, len)) {
    const Blocks X{P, S, prog, len, vc, vp, Bt, M, N, a.size(2), stack_depth(prog, len),
                   block_rows(P), P.rho == kRneFp16, P.rho == kRneFp64, oes, obase,
                   cpu_isa() != Isa::kScalar};
    if (S.ws64 || P.rho == kRneFp64) run_blocks<double>(X, a, b, sa, sb);
    else run_blocks<float>(X, a, b, sa, sb);
    throw_if_interrupted();
    return out;
  }
  // (the scalar schedule: tens of vector-kernel MACs per product)
  parallel_for(0, Bt * M, std::max<int64_t>(1, grain_for(N * a.size(2)) / 32), [&](int64_t lo, int64_t hi) {
    FpEnvGuard guard;  // IEEE additions and conversions on the host FPU
    for (int64_t r = lo; r < hi && !interrupted(); ++r) {
      const int64_t bi = r / M, i = r % M;
      for (int64_t j = 0; j < N; ++j) {
        const SchedSrc src{va, vb, bi, i, j};
        const OutAt partial{vp, P.rho, P.fo, Bt, bi, i, j};
        const OutAt cval{vc, P.rho, P.fo, Bt, bi, i, j};
        const uint64_t v = run_schedule(P, S, prog, len, src, partial, cval);
        uint8_t* p = obase + (r * N + j) * oes;
        if (oes == 2) *reinterpret_cast<uint16_t*>(p) = uint16_t(v);
        else if (oes == 4) *reinterpret_cast<uint32_t*>(p) = uint32_t(v);
        else *reinterpret_cast<uint64_t*>(p) = v;
      }
      check_interrupt_main();
    }
  });
  throw_if_interrupted();
  return out;
}

}  // namespace mma
