// CPU kernel of mma_emu::_gemm: decode once, then one chain per output element
// (csrc/core/chain.h), parallel over output tiles with at::parallel_for.  Where
// fast_eligible() says so and the CPU has AVX2, the vectorised fast paths (fast_fdpa.cpp,
// fast_values.cpp) compute the same bits; MMA_EMU_SCALAR=1 forces this scalar path.
#include <ATen/Parallel.h>

#include <vector>

#include "../core/chain.h"
#include "../gemm.h"
#include "decoded.h"
#include "fast_paths.h"
#include "fpenv.h"

namespace mma {
namespace {

constexpr int64_t kTileN = 16;

// One output tile; compiled for AVX2 and baseline x86-64 (dispatch at load time).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
void compute_tile(const Params& P, const Decoded& A, const Decoded& B, int64_t K, int64_t i,
                  int64_t j0, int64_t j1, const View3& vc, int64_t bi, const Dec* sa,
                  const Dec* sb, int64_t nblk, uint8_t sflag_i, const std::vector<uint8_t>& sflag_b,
                  uint8_t* orow, int oes) {
  const Operand a = A.row(i, K);
  for (int64_t j = j0; j < j1; ++j) {
    const uint8_t fl = A.row_flags[size_t(i)] | B.row_flags[size_t(j)] | sflag_i |
                       (sa ? sflag_b[size_t(j)] : 0);
    const uint64_t r = dot_fused(P, a, B.row(j, K), int(K), vc.at(bi, i, j), sa,
                                 sb ? sb + j * nblk : nullptr, fl);
    uint8_t* p = orow + j * oes;
    if (oes == 2) *reinterpret_cast<uint16_t*>(p) = uint16_t(r);
    else *reinterpret_cast<uint32_t*>(p) = uint32_t(r);
  }
}

void gemm_fused(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                const c10::optional<at::Tensor>& sa, const c10::optional<at::Tensor>& sb,
                const Params& P, at::Tensor& out) {
  const int64_t Bt = a.size(0), M = a.size(1), K = a.size(2), N = b.size(2);
  // B^T made contiguous first: decoding it row by row then reads memory in order
  const at::Tensor bt = b.transpose(1, 2).contiguous();
  const View3 va = view3(a), vb = view3(bt), vc = view3(c);
  const bool scaled = sa.has_value();
  const int64_t nblk = scaled ? sa->size(2) : 0;
  View3 vsa{}, vsb{};
  if (scaled) { vsa = view3(*sa); vsb = view3(*sb); }
  uint8_t* obase = static_cast<uint8_t*>(out.data_ptr());
  const int oes = int(out.element_size());
  const FastKind fk = fast_eligible(P);
  const bool fast = fk == FastKind::kFdpa || fk == FastKind::kTr || fk == FastKind::kE ||
                    fk == FastKind::kGst;
  struct Workspace {
    Decoded A, B;
    std::vector<Dec> SA, SB;
    std::vector<uint8_t> fsa, fsb;
  };
  // One batch element; the parallel_for calls inside run inline when the caller is
  // already parallel over the batch.
  auto one_batch = [&](int64_t bi, Workspace& w) {
    decode_rows(va, bi, M, K, false, P.fa, w.A);
    decode_rows(vb, bi, N, K, false, P.fb, w.B);
    if (scaled) {
      decode_scales(vsa, bi, M, nblk, false, P.fs, w.SA, w.fsa);
      decode_scales(vsb, bi, N, nblk, true, P.fs, w.SB, w.fsb);
    }
    if (fast && fast_fdpa_batch(P, w.A, w.B, scaled ? w.SA.data() : nullptr,
                                scaled ? w.SB.data() : nullptr, scaled ? w.fsa.data() : nullptr,
                                scaled ? w.fsb.data() : nullptr, nblk, M, N, K, vc, bi, obase, oes))
      return;
    const int64_t ntn = (N + kTileN - 1) / kTileN;
    const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, K * kTileN));
    at::parallel_for(0, M * ntn, grain, [&](int64_t lo, int64_t hi) {
      FpEnvGuard guard;  // epilogue additions use the FPU
      for (int64_t t = lo; t < hi && !interrupted(); ++t) {
        if ((t & 63) == 0) check_interrupt_main();
        const int64_t i = t / ntn, j0 = (t % ntn) * kTileN;
        compute_tile(P, w.A, w.B, K, i, j0, std::min(N, j0 + kTileN), vc, bi,
                     scaled ? w.SA.data() + i * nblk : nullptr, scaled ? w.SB.data() : nullptr,
                     nblk, scaled ? w.fsa[size_t(i)] : 0, w.fsb, obase + (bi * M + i) * N * oes,
                     oes);
      }
    });
  };
  const int64_t work = M * N * std::max<int64_t>(K, 1);
  if (Bt > 1 && work < (1 << 16)) {  // many small products: parallel over the batch
    const int64_t grain = std::max<int64_t>(1, (1 << 16) / work);
    at::parallel_for(0, Bt, grain, [&](int64_t lo, int64_t hi) {
      Workspace w;
      for (int64_t bi = lo; bi < hi && !interrupted(); ++bi) {
        one_batch(bi, w);
        check_interrupt_main();
      }
    });
  } else {
    Workspace w;
    for (int64_t bi = 0; bi < Bt && !interrupted(); ++bi) one_batch(bi, w);
  }
}

// fma / ftz_addmul run on IEEE values: inputs arrive as float32/float64 tensors.
template <class T>
void gemm_values(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                 const Params& P, at::Tensor& out) {
  const int64_t Bt = a.size(0), M = a.size(1), K = a.size(2), N = b.size(2);
  const at::Tensor Ac = a.contiguous();                  // (Bt, M, K)
  const at::Tensor Bc = b.transpose(1, 2).contiguous();  // (Bt, N, K)
  const T* ap = Ac.data_ptr<T>();
  const T* bp = Bc.data_ptr<T>();
  const T* cp = c.data_ptr<T>();
  const int64_t cs0 = c.stride(0), cs1 = c.stride(1), cs2 = c.stride(2);
  T* op = out.data_ptr<T>();
  const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, K * N));
  at::parallel_for(0, Bt * M, grain, [&](int64_t lo, int64_t hi) {
    FpEnvGuard guard;
    for (int64_t r = lo; r < hi && !interrupted(); ++r) {
      check_interrupt_main();
      const int64_t bi = r / M, i = r % M;
      const T* arow = ap + r * K;
      for (int64_t j = 0; j < N; ++j) {
        const T cv = cp[bi * cs0 + i * cs1 + j * cs2];
        const T* bcol = bp + (bi * N + j) * K;
        T v;
        if constexpr (sizeof(T) == 4) {
          v = P.op == kFma ? dot_fma<T>(P, arow, bcol, int(K), cv)
                           : dot_ftz(P, arow, bcol, int(K), cv);
        } else {
          v = dot_fma<T>(P, arow, bcol, int(K), cv);
        }
        if (is_nan(v)) {
          if constexpr (sizeof(T) == 4) v = f32_of(uint32_t(P.nan_bits));
          else v = f64_of(P.nan_bits);
        }
        op[r * N + j] = v;
      }
    }
  });
}

}  // namespace

at::Tensor gemm_cpu(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                    const c10::optional<at::Tensor>& sa, const c10::optional<at::Tensor>& sb,
                    const Params& P) {
  at::Tensor out = at::empty({a.size(0), a.size(1), b.size(2)}, c.options().memory_format(
                                                                    at::MemoryFormat::Contiguous));
  if (out.numel() == 0) return out;
  if (P.op == kFma || P.op == kFtzAddMul) {
    if (fast_values(P, a, b, c, out)) {
    } else if (c.scalar_type() == at::kDouble) {
      gemm_values<double>(a, b, c, P, out);
    } else {
      gemm_values<float>(a, b, c, P, out);
    }
  } else {
    gemm_fused(a, b, c, sa, sb, P, out);
  }
  throw_if_interrupted();
  return out;
}

}  // namespace mma
