// CPU kernel of mma_emu::_gemm: decode once, then one chain per output element
// (csrc/core/chain.h), parallel over output tiles with at::parallel_for.
#include <ATen/Parallel.h>

#include <vector>

#include "../core/chain.h"
#include "../gemm.h"
#include "fpenv.h"

namespace mma {
namespace {

constexpr int64_t kTileN = 16;

// Decode a (M, K) slab of codes, row-major; flags[i] = row i holds a NaN or infinity.
void decode_rows(const View3& v, int64_t bi, int64_t M, int64_t K, bool transposed,
                 const FormatDesc& f, std::vector<Dec>& out, std::vector<uint8_t>& flags) {
  out.resize(size_t(M * K));
  flags.assign(size_t(M), 0);
  at::parallel_for(0, M, 64, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      uint8_t fl = 0;
      Dec* row = out.data() + i * K;
      for (int64_t k = 0; k < K; ++k) {
        row[k] = decode(f, transposed ? v.at(bi, k, i) : v.at(bi, i, k));
        fl |= row[k].cls;
      }
      flags[size_t(i)] = fl;
    }
  });
}

void gemm_fused(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                const c10::optional<at::Tensor>& sa, const c10::optional<at::Tensor>& sb,
                const Params& P, at::Tensor& out) {
  const int64_t Bt = a.size(0), M = a.size(1), K = a.size(2), N = b.size(2);
  const View3 va = view3(a), vb = view3(b), vc = view3(c);
  const bool scaled = sa.has_value();
  const int64_t nblk = scaled ? sa->size(2) : 0;
  View3 vsa{}, vsb{};
  if (scaled) { vsa = view3(*sa); vsb = view3(*sb); }
  uint8_t* obase = static_cast<uint8_t*>(out.data_ptr());
  const int oes = int(out.element_size());
  std::vector<Dec> A, B, SA, SB;
  std::vector<uint8_t> fa, fb, fsa, fsb;
  for (int64_t bi = 0; bi < Bt; ++bi) {
    decode_rows(va, bi, M, K, false, P.fa, A, fa);
    decode_rows(vb, bi, N, K, true, P.fb, B, fb);
    if (scaled) {
      decode_rows(vsa, bi, M, nblk, false, P.fs, SA, fsa);
      decode_rows(vsb, bi, N, nblk, true, P.fs, SB, fsb);
    }
    const int64_t ntn = (N + kTileN - 1) / kTileN;
    const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, K * kTileN));
    at::parallel_for(0, M * ntn, grain, [&](int64_t lo, int64_t hi) {
      FpEnvGuard guard;  // epilogue additions use the FPU
      for (int64_t t = lo; t < hi; ++t) {
        const int64_t i = t / ntn, j0 = (t % ntn) * kTileN;
        const int64_t j1 = std::min(N, j0 + kTileN);
        for (int64_t j = j0; j < j1; ++j) {
          const uint64_t cb = vc.at(bi, i, j);
          const uint64_t r = dot_fused(
              P, A.data() + i * K, B.data() + j * K, int(K), cb,
              scaled ? SA.data() + i * nblk : nullptr, scaled ? SB.data() + j * nblk : nullptr,
              fa[size_t(i)] | fb[size_t(j)] | (scaled ? fsa[size_t(i)] | fsb[size_t(j)] : 0));
          uint8_t* p = obase + ((bi * M + i) * N + j) * oes;
          if (oes == 2) *reinterpret_cast<uint16_t*>(p) = uint16_t(r);
          else *reinterpret_cast<uint32_t*>(p) = uint32_t(r);
        }
      }
    });
  }
}

// fma / ftz_addmul run on IEEE values: inputs arrive as float32/float64 tensors.
template <class T>
void gemm_values(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                 const Params& P, at::Tensor& out) {
  const int64_t Bt = a.size(0), M = a.size(1), K = a.size(2), N = b.size(2);
  T* op = out.data_ptr<T>();
  for (int64_t bi = 0; bi < Bt; ++bi) {
    const at::Tensor Ab = a[bi].contiguous();
    const at::Tensor Bt_ = b[bi].t().contiguous();
    const at::Tensor Cb = c[bi];
    const T* ap = Ab.data_ptr<T>();
    const T* bp = Bt_.data_ptr<T>();
    const T* cp = Cb.data_ptr<T>();
    const int64_t cs0 = Cb.stride(0), cs1 = Cb.stride(1);
    const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, K * N));
    at::parallel_for(0, M, grain, [&](int64_t lo, int64_t hi) {
      FpEnvGuard guard;
      for (int64_t i = lo; i < hi; ++i) {
        for (int64_t j = 0; j < N; ++j) {
          const T cv = cp[i * cs0 + j * cs1];
          T r;
          if constexpr (sizeof(T) == 4) {
            r = P.op == kFma ? dot_fma<T>(P, ap + i * K, bp + j * K, int(K), cv)
                             : dot_ftz(P, ap + i * K, bp + j * K, int(K), cv);
          } else {
            r = dot_fma<T>(P, ap + i * K, bp + j * K, int(K), cv);
          }
          if (is_nan(r)) {
            const uint64_t nb = P.nan_bits;
            if constexpr (sizeof(T) == 4) r = f32_of(uint32_t(nb));
            else r = f64_of(nb);
          }
          op[(bi * M + i) * N + j] = r;
        }
      }
    });
  }
}

}  // namespace

at::Tensor gemm_cpu(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                    const c10::optional<at::Tensor>& sa, const c10::optional<at::Tensor>& sb,
                    const Params& P) {
  at::Tensor out = at::empty({a.size(0), a.size(1), b.size(2)}, c.options().memory_format(
                                                                    at::MemoryFormat::Contiguous));
  if (out.numel() == 0) return out;
  if (P.op == kFma || P.op == kFtzAddMul) {
    if (c.scalar_type() == at::kDouble) gemm_values<double>(a, b, c, P, out);
    else gemm_values<float>(a, b, c, P, out);
  } else {
    gemm_fused(a, b, c, sa, sb, P, out);
  }
  return out;
}

}  // namespace mma
