// The fused ops' CPU kernel (T-, ST-, GST-, TR-, GTR-, E-FDPA) for one batch element, and the
// FdpaPanels building block of the schedule kernel.  K runs in blocks: each block is decoded,
// turned into the vector kernels' planes (fdpa_engine.h) and run; the lanes the planes cannot
// hold (NaN / Inf / out-of-window operands) run the core's chain over the same block, from
// the same accumulator.  Working memory: O(M * N) accumulators plus one block (about 32 MB),
// whatever K is (a K = 10^7 GEMV no longer holds 170 bytes per k).
#include <algorithm>
#include <cstring>
#include <vector>

#include "clones.h"
#include "decoded.h"
#include "fast_paths.h"
#include "fpenv.h"

namespace mma {

namespace {
constexpr int64_t kRowBlock = 16;

// rows of `row_work` items each: the engines' grains, raised so that a piece has kTaskWork
ParFor aten_par(int64_t row_work) {
  return [row_work](int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
    parallel_for(0, n, std::max(grain, grain_for(row_work)), body);
  };
}

int64_t gcd64(int64_t a, int64_t b) { return b ? gcd64(b, a % b) : a; }

// runs of fp16 codes <-> accumulator words (vectorised: fp16 C in, fp16 D out)
MMA_SIMD_CLONES void f32_words_of_f16(const uint16_t* __restrict h, int64_t n, uint32_t* __restrict w) {
  for (int64_t j = 0; j < n; ++j) w[j] = f32_bits_of_f16(h[j]);
}
MMA_SIMD_CLONES void f16_of_f32_words(const uint32_t* __restrict w, int64_t n, uint16_t* __restrict h) {
  for (int64_t j = 0; j < n; ++j) h[j] = uint16_t(f16_bits_of_f32(w[j]));
}

// C's row i (element type T, any stride) as accumulator words (an fp16 C as the fp32 word
// of its value)
template <class T>
void c_row(const View3& vc, int64_t bi, int64_t i, int64_t N, bool half, uint32_t* row) {
  const uint8_t* p = vc.base + bi * vc.s0 + i * vc.s1;
  const int64_t s = vc.s2;
  auto at = [&](int64_t j) {
    T c;
    std::memcpy(&c, p + j * s, sizeof c);
    return uint32_t(c);
  };
  if (s == 0) {  // a broadcast row: one value
    std::fill(row, row + N, half ? f32_bits_of_f16(at(0)) : at(0));
  } else if (half && sizeof(T) == 2 && s == 2) {
    f32_words_of_f16(reinterpret_cast<const uint16_t*>(p), N, row);
  } else if (half) {
    for (int64_t j = 0; j < N; ++j) row[j] = f32_bits_of_f16(at(j));
  } else if (s == int64_t(sizeof(T))) {
    const T* q = reinterpret_cast<const T*>(p);
    for (int64_t j = 0; j < N; ++j) row[j] = uint32_t(q[j]);
  } else {
    for (int64_t j = 0; j < N; ++j) row[j] = at(j);
  }
}
}  // namespace

// ---- FdpaPanels ---------------------------------------------------------------------------
bool FdpaPanels::prepare(const Params& P, const Decoded& A, const Decoded& B, const Dec* SA,
                         const Dec* SB, const uint8_t* fsa, const uint8_t* fsb, int64_t nblk,
                         int64_t M, int64_t N, int64_t K) {
  eng_ = nullptr;
  if (P.multipass()) return false;
  thread_local FdpaEngine eng;  // reused between calls
  if (!eng.setup(P, cpu_isa())) return false;
  eng.build(A, B, SA, SB, fsa, fsb, nblk, M, N, K, aten_par(K));
  eng_ = &eng;
  return true;
}

// ---- the K-blocked chain ------------------------------------------------------------------
namespace {

// The core's chain over one block for output (i, j), from the accumulator word a.
MMA_SIMD_CLONES
void core_lanes(const Params& Pc, const Decoded& A, const Decoded& B, int64_t K, int64_t i,
                const int64_t* js, int64_t nj, int64_t j0, const Dec* SA, const Dec* SB,
                int64_t nb, const uint8_t* fsa, const uint8_t* fsb, bool half, uint32_t* accrow) {
  const Operand a = A.row(i, K);
  for (int64_t t = 0; t < nj; ++t) {
    const int64_t j = js ? js[t] : j0 + t;
    const uint8_t fl = A.row_flags[size_t(i)] | B.row_flags[size_t(j)] | (SA ? fsa[i] | fsb[j] : 0);
    uint32_t& w = accrow[j];
    const uint64_t r = dot_fused(Pc, a, B.row(j, K), int(K), half ? f16_bits_of_f32(w) : w,
                                 SA ? SA + i * nb : nullptr, SB ? SB + j * nb : nullptr, fl);
    w = half ? f32_bits_of_f16(uint32_t(r)) : uint32_t(r);
  }
}

struct BlockWork {
  Decoded A, B;
  std::vector<Dec> SA, SB;
  std::vector<uint8_t> fsa, fsb;
  FdpaEngine eng;
};

}  // namespace

void fused_batch(const Params& P, const View3& va, const View3& vbt, const View3* vs,
                 const View3& vc, int64_t bi, int64_t M, int64_t N, int64_t K, uint8_t* out,
                 int oes, bool fast, int64_t budget) {
  const bool half = P.rho == kRneFp16;
  Params Pc = P;  // the chain without the epilogue: blocks continue from the accumulator
  Pc.epilogue = 0;
  // the calling thread's work and accumulators, named by reference: the loop bodies run on
  // torch's pool threads, where the thread_local names mean those threads' own copies
  thread_local BlockWork this_thread_work;
  BlockWork& w = this_thread_work;
  fast = fast && cpu_isa() != Isa::kScalar && w.eng.setup(P, cpu_isa());
  const int64_t W = fast ? (N + kW - 1) / kW * kW : N;
  const bool scaled = vs != nullptr;
  // blocks start on instructions and on scale blocks
  int64_t align = int64_t(P.L) * (P.multipass() ? P.passes : 1);
  if (scaled) align = align / gcd64(align, P.block) * P.block;
  const int64_t per_k = (M + N) * 9 + (fast ? (M + W) * 5 : 0);
  int64_t KB = std::max<int64_t>(1, budget / std::max<int64_t>(per_k, 1) / align) * align;
  if (KB >= K) KB = K;
  // the accumulators (kept between calls: no page faults; padding columns are never read)
  thread_local std::vector<uint32_t> this_thread_acc;
  // fp32 D without an epilogue, rows as long as the panels': D's words are the accumulators
  // (no copy at the end)
  const bool in_out = !P.epilogue && oes == 4 && !half && W == N;
  uint32_t* acc = reinterpret_cast<uint32_t*>(out + bi * M * N * oes);
  if (!in_out) {
    this_thread_acc.resize(size_t(M * W));
    acc = this_thread_acc.data();
  }
  parallel_for(0, M, grain_for(N), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      uint32_t* row = acc + i * W;
      if (P.epilogue) std::fill(row, row + N, half ? f32_bits_of_f16(0) : 0u);
      else if (vc.esize == 4) c_row<uint32_t>(vc, bi, i, N, half, row);
      else if (vc.esize == 2) c_row<uint16_t>(vc, bi, i, N, half, row);
      else
        for (int64_t j = 0; j < N; ++j) {
          const uint64_t c = vc.at(bi, i, j);
          row[j] = half ? f32_bits_of_f16(uint32_t(c)) : uint32_t(c);
        }
    }
  });
  // D's row i, columns [j0, j1), from the finished accumulators (the epilogue's additions
  // under the caller's round to nearest)
  auto write_out = [&](int64_t i, int64_t j0, int64_t j1) {
    if (in_out) return;
    uint8_t* orow = out + (bi * M + i) * N * oes;
    const uint32_t* arow = acc + i * W;
    const int64_t n = j1 - j0;
    if (!P.epilogue && oes == 4 && !half) {  // the fp32 words as they are
      std::memcpy(orow + j0 * 4, arow + j0, size_t(n) * 4);
      return;
    }
    if (!P.epilogue && oes == 2) {
      uint16_t* o16 = reinterpret_cast<uint16_t*>(orow);
      if (half) f16_of_f32_words(arow + j0, n, o16 + j0);
      else for (int64_t j = j0; j < j1; ++j) o16[j] = uint16_t(arow[j]);
      return;
    }
    for (int64_t j = j0; j < j1; ++j) {
      const uint32_t a32 = arow[j];
      uint64_t r = half ? f16_bits_of_f32(a32) : a32;
      if (P.epilogue) r = epilogue_add(P, r, vc.at(bi, i, j));
      if (oes == 2) reinterpret_cast<uint16_t*>(orow)[j] = uint16_t(r);
      else reinterpret_cast<uint32_t*>(orow)[j] = uint32_t(r);
    }
  };
  // the last K block's fast tasks write their own outputs while the accumulators are in
  // cache (was a pass over all M x N words after the blocks: 1-2% of a 1024^3 product)
  bool written = false;
  const ParFor par = aten_par(std::min(K, KB));
  for (int64_t kb0 = 0; kb0 < K && !interrupted(); kb0 += KB) {
    const int64_t kl = std::min(KB, K - kb0);
    // the common rows' planes are built while decoding (FdpaEngine::begin)
    const bool fill = fast && w.eng.begin(M, N, kl, scaled);
    // fp16 / bf16 / tf32 / fp8 codes straight into the planes where every row and column can
    // use them (no Decoded rows: decoding them was about 5% of a 1024^3 fp16 product); else
    // decoded
    const DecPath da = dec_path(P.fa, va.esize), db = dec_path(P.fb, vbt.esize);
    auto takes = [](DecPath d) { return d != DecPath::kGeneric && d != DecPath::kLut8; };
    auto code = [](DecPath d) {
      constexpr PlaneCode of[] = {PlaneCode::kFp16, PlaneCode::kBf16, PlaneCode::kTf32, PlaneCode::kE4m3Fn,
                                  PlaneCode::kE5m2, PlaneCode::kE4m3Fnuz, PlaneCode::kE5m2Fnuz};
      static_assert(int(DecPath::kE5m2Fnuz) - int(DecPath::kFp16) == 6, "DecPath's order");
      return of[int(d) - int(DecPath::kFp16)];
    };
    const bool direct =
        fill && !scaled && takes(da) && takes(db) &&
        w.eng.fill_direct(CodeRows{va.base + bi * va.s0 + kb0 * va.s2, va.s1, va.s2, va.esize}, code(da),
                          CodeRows{vbt.base + bi * vbt.s0 + kb0 * vbt.s1, vbt.s2, vbt.s1, vbt.esize},
                          code(db), M, N, kl, w.A, w.B, par);
    if (!direct) {
      if (fill) w.eng.begin(M, N, kl, scaled);  // (fill_direct may have written some)
      const RunSink fa = [&](int64_t r0, int64_t r1, int64_t k0, int64_t n) { w.eng.fill_a(w.A, r0, r1, k0, n); };
      const RunSink fb = [&](int64_t r0, int64_t r1, int64_t k0, int64_t n) { w.eng.fill_b(w.B, r0, r1, k0, n); };
      decode_rows(va, bi, M, kb0, kl, false, P.fa, w.A, fill ? &fa : nullptr);
      decode_rows(vbt, bi, N, kb0, kl, true, P.fb, w.B, fill ? &fb : nullptr);
    }
    int64_t nb = 0;
    if (scaled) {
      nb = (kl + P.block - 1) / P.block;
      decode_scales(vs[0], bi, M, kb0 / P.block, nb, false, P.fs, w.SA, w.fsa);
      decode_scales(vs[1], bi, N, kb0 / P.block, nb, true, P.fs, w.SB, w.fsb);
    }
    const Dec* SA = scaled ? w.SA.data() : nullptr;
    const Dec* SB = scaled ? w.SB.data() : nullptr;
    const uint8_t* fsa = scaled ? w.fsa.data() : nullptr;
    const uint8_t* fsb = scaled ? w.fsb.data() : nullptr;
    if (fast) {
      w.eng.build(w.A, w.B, SA, SB, fsa, fsb, nb, M, N, kl, par);
      std::vector<int64_t> bad_cols;  // columns the planes do not hold: the core
      for (int64_t j = 0; j < N; ++j)
        if (!w.eng.col_ok(j)) bad_cols.push_back(j);
      // tasks: a row block x a range of column panels (Tiles; a panel's planes: fp32 values
      // and int8 exponents of kW columns, two planes for E-FDPA)
      const Tiles tl((M + kRowBlock - 1) / kRowBlock, W / kW, w.eng.panel_bytes());
      const int64_t task_work = kRowBlock * W / tl.npc * kl;
      const bool last = kb0 + kl >= K;
      written = last;
      parallel_for(0, tl.count(), grain_for(task_work), [&](int64_t lo, int64_t hi) {
        FpEnvGuard env;
        for (int64_t t = lo; t < hi && !interrupted(); ++t) {
          const int64_t i0 = tl.rb(t) * kRowBlock, i1 = std::min(M, i0 + kRowBlock);
          const int64_t p0 = tl.p0(t), p1 = tl.p1(t);
          const int64_t j0 = std::min(N, p0 * kW), j1 = std::min(N, p1 * kW);
          w.eng.run(i0, i1, 0, kl, acc + i0 * W, W, p0, p1);
          const auto bc0 = std::lower_bound(bad_cols.begin(), bad_cols.end(), j0);
          const auto bc1 = std::lower_bound(bc0, bad_cols.end(), j1);
          for (int64_t i = i0; i < i1; ++i) {
            uint32_t* row = acc + i * W;
            if (w.eng.row_ok(i)) {
              if (bc1 > bc0)  // (none after fill_direct, whose A and B hold no decoded rows)
                core_lanes(Pc, w.A, w.B, kl, i, bad_cols.data() + (bc0 - bad_cols.begin()),
                           int64_t(bc1 - bc0), 0, SA, SB, nb, fsa, fsb, half, row);
            } else
              core_lanes(Pc, w.A, w.B, kl, i, nullptr, j1 - j0, j0, SA, SB, nb, fsa, fsb, half,
                         row);
            if (last) write_out(i, j0, j1);
          }
          check_interrupt_main();
        }
      });
    } else {  // the core everywhere, in tiles of 16 outputs
      constexpr int64_t kTileN = 16;
      const int64_t ntn = (N + kTileN - 1) / kTileN;
      // (the core costs tens of vector-kernel MACs per product: pieces 1/32 as long)
      const int64_t grain = std::max<int64_t>(1, grain_for(kl * kTileN) / 32);
      parallel_for(0, M * ntn, grain, [&](int64_t lo, int64_t hi) {
        FpEnvGuard env;
        for (int64_t t = lo; t < hi && !interrupted(); ++t) {
          if ((t & 63) == 0) check_interrupt_main();
          const int64_t i = t / ntn, j0 = (t % ntn) * kTileN;
          core_lanes(Pc, w.A, w.B, kl, i, nullptr, std::min(N, j0 + kTileN) - j0, j0, SA, SB,
                     nb, fsa, fsb, half, acc + i * W);
        }
      });
    }
  }
  if (interrupted() || written) return;
  parallel_for(0, M, grain_for(N * 4), [&](int64_t lo, int64_t hi) {
    FpEnvGuard env;  // epilogue additions round to nearest
    for (int64_t i = lo; i < hi; ++i) write_out(i, 0, N);
  });
}

}  // namespace mma
