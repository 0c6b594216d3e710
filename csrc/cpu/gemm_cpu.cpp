// CPU kernel of mma_emu::_gemm: the fused ops run K block by K block (fast_fdpa.cpp: the
// vector kernels where fast_eligible() says so and the CPU has them, else one core chain per
// output element, csrc/core/chain.h); the IEEE-value ops (FMA chain, FTZ-AddMul) through
// fast_values.cpp or the core chain here.  MMA_EMU_SCALAR=1 forces the core everywhere.
#include <vector>

#include "../core/chain.h"
#include "../gemm.h"
#include "decoded.h"
#include "fast_paths.h"
#include "fpenv.h"

namespace mma {
namespace {

// Below this many MACs a product splits poorly inside (few row blocks, a parallel region per
// K block): a batch of them runs one product per thread instead.
constexpr int64_t kBatchSplitWork = int64_t(1) << 22;

void gemm_fused(const Tensor& a, const Tensor& b, const Tensor& c, const OptTensor& sa,
                const OptTensor& sb, const Params& P, Tensor& out) {
  const int64_t Bt = a.size(0), M = a.size(1), K = a.size(2), N = b.size(2);
  // B is read as its columns in place (decode_rows tiles the reads): no transposed copy
  const View3 va = view3(a), vb = view3(b), vc = view3(c);
  const bool scaled = sa.has_value();
  View3 vs[2]{};
  if (scaled) { vs[0] = view3(*sa); vs[1] = view3(*sb); }
  uint8_t* obase = static_cast<uint8_t*>(out.data_ptr());
  const int oes = int(out.element_size());
  const FastKind fk = fast_eligible(P);
  const bool fast = fk == FastKind::kFdpa || fk == FastKind::kTr || fk == FastKind::kE ||
                    fk == FastKind::kGst;
  auto one_batch = [&](int64_t bi, int64_t budget) {
    fused_batch(P, va, vb, scaled ? vs : nullptr, vc, bi, M, N, K, obase, oes, fast, budget);
  };
  const int64_t work = M * N * std::max<int64_t>(K, 1);
  const int64_t nt = num_threads();
  if (Bt > 1 && nt > 1 && Bt >= nt && work < kBatchSplitWork * task_work() >> 19) {
    // many small products: parallel over the batch (the parallel_for calls inside then run
    // inline), each thread with its share of the block budget
    const int64_t budget = std::max<int64_t>(1, block_bytes() / nt);
    parallel_for(0, Bt, grain_for(work), [&](int64_t lo, int64_t hi) {
      for (int64_t bi = lo; bi < hi && !interrupted(); ++bi) {
        one_batch(bi, budget);
        check_interrupt_main();
      }
    });
  } else {
    for (int64_t bi = 0; bi < Bt && !interrupted(); ++bi) one_batch(bi, block_bytes());
  }
}

// fma / ftz_addmul run on IEEE values: inputs arrive as float32/float64 tensors.
template <class T>
void gemm_values(const Tensor& a, const Tensor& b, const Tensor& c, const Params& P,
                 Tensor& out) {
  const int64_t Bt = a.size(0), M = a.size(1), K = a.size(2), N = b.size(2);
  const Tensor Ac = torch::stable::contiguous(a);                                // (Bt, M, K)
  const Tensor Bc = torch::stable::contiguous(torch::stable::transpose(b, 1, 2));  // (Bt, N, K)
  const T* ap = Ac.const_data_ptr<T>();
  const T* bp = Bc.const_data_ptr<T>();
  const T* cp = c.const_data_ptr<T>();
  const int64_t cs0 = c.stride(0), cs1 = c.stride(1), cs2 = c.stride(2);
  T* op = out.mutable_data_ptr<T>();
  // (the scalar chain: tens of vector-kernel MACs per product)
  parallel_for(0, Bt * M, std::max<int64_t>(1, grain_for(K * N) / 32), [&](int64_t lo, int64_t hi) {
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

Tensor gemm_cpu(const Tensor& a, const Tensor& b, const Tensor& c, const OptTensor& sa,
                const OptTensor& sb, const Params& P) {
  Tensor out = torch::stable::new_empty(c, {a.size(0), a.size(1), b.size(2)});  // contiguous
  if (out.numel() == 0) return out;
  if (P.op == kFma || P.op == kFtzAddMul) {
    if (fast_values(P, a, b, c, out)) {
    } else if (c.scalar_type() == ScalarType::Double) {
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
