// The FMA chain (fp32, fp64) and FTZ-AddMul through the vector kernels (values_engine.h,
// kern/values.inc): the torch side.  K runs in blocks (packed operands of about 32 MB at
// most), the exact accumulators carried from block to block.
#include <algorithm>
#include <vector>

#include "fast_paths.h"
#include "fpenv.h"
#include "values_engine.h"

namespace mma {
namespace {


// rows of `row_work` items each: the engine's grains, raised so that a piece has kTaskWork
ParFor aten_par(int64_t row_work) {
  return [row_work](int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
    parallel_for(0, n, std::max(grain, grain_for(row_work)), body);
  };
}

template <class T>
bool run_values(const Params& P, const Tensor& a, const Tensor& b, const Tensor& c,
                Tensor& out) {
  // the calling thread's engine and accumulators, named by reference: the loop bodies run
  // on torch's pool threads, where the thread_local names mean those threads' own copies
  thread_local ValuesEngine<T> this_thread_eng;
  ValuesEngine<T>& eng = this_thread_eng;
  if (!eng.setup(P, cpu_isa())) return false;
  const int64_t Bt = a.size(0), M = a.size(1), K = a.size(2), N = b.size(2);
  const T* cp = c.const_data_ptr<T>();
  const int64_t cs0 = c.stride(0), cs1 = c.stride(1), cs2 = c.stride(2);
  T* op = out.mutable_data_ptr<T>();
  const int64_t Np = (N + eng.W - 1) / eng.W * eng.W;
  const int64_t per_k = int64_t(sizeof(T)) * (M + Np);
  int64_t KB = std::max<int64_t>(1, block_bytes() / std::max<int64_t>(per_k, 1) / eng.LL) * eng.LL;
  if (KB >= K) KB = K;
  constexpr int64_t RB = 24;
  const int64_t nrb = (M + RB - 1) / RB;
  const bool one_block = KB >= K;
  // accumulators: one row block's (in cache) when K is one block, else all of them; kept
  // between calls (no page faults, no zero fill)
  thread_local std::vector<T> this_thread_accbuf;
  std::vector<T>& accbuf = this_thread_accbuf;
  if (!one_block) accbuf.resize(size_t(M * Np));
  const ParFor par = aten_par(std::min(K, KB));
  for (int64_t bi = 0; bi < Bt && !interrupted(); ++bi) {
    const Tensor ab = torch::stable::select(a, 0, bi);
    const Tensor bb = torch::stable::select(b, 0, bi);
    // rows [i0, i1) x columns [j0, j1) into acc (row i0 first, stride Np)
    auto init = [&](int64_t i0, int64_t i1, T* acc, int64_t j0 = 0, int64_t j1 = -1) {
      if (j1 < 0) j1 = Np;
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = j0; j < j1; ++j)
          acc[(i - i0) * Np + j] = (P.epilogue || j >= N) ? T(0) : cp[bi * cs0 + i * cs1 + j * cs2];
    };
    auto finish = [&](int64_t i0, int64_t i1, const T* acc, int64_t j0 = 0, int64_t j1 = -1) {
      if (j1 < 0) j1 = N;
      for (int64_t i = i0; i < i1; ++i) {
        T* orow = op + (bi * M + i) * N;
        for (int64_t j = j0; j < std::min(j1, N); ++j) {
          T v = acc[(i - i0) * Np + j];
          if (P.epilogue) v = add_rn(v, cp[bi * cs0 + i * cs1 + j * cs2]);
          if (is_nan(v)) {
            if constexpr (sizeof(T) == 4) v = f32_of(uint32_t(P.nan_bits));
            else v = f64_of(P.nan_bits);
          }
          orow[j] = v;
        }
      }
    };
    if (!one_block) parallel_for(0, M, grain_for(Np), [&](int64_t lo, int64_t hi) { init(lo, hi, accbuf.data() + lo * Np); });
    for (int64_t k0 = 0; k0 < std::max<int64_t>(K, 1) && !interrupted(); k0 += std::max<int64_t>(KB, 1)) {
      const int64_t kl = std::min(KB, K - k0);
      eng.pack(P, ab.const_data_ptr<T>(), ab.stride(0), ab.stride(1), bb.const_data_ptr<T>(),
               bb.stride(0), bb.stride(1), M, N, k0, kl, par);
      // tasks: a row block x a range of column panels (Tiles)
      const Tiles tl(nrb, eng.NP);
      const int64_t task_work = RB * Np / tl.npc * std::max<int64_t>(kl, 1);
      parallel_for(0, tl.count(), grain_for(task_work), [&](int64_t lo, int64_t hi) {
        FpEnvGuard env;  // IEEE round to nearest, no FTZ/DAZ
        thread_local std::vector<T> rowbuf;
        if (one_block) rowbuf.resize(size_t(RB * Np));
        for (int64_t t = lo; t < hi && !interrupted(); ++t) {
          const int64_t i0 = tl.rb(t) * RB, i1 = std::min(M, i0 + RB);
          const int64_t p0 = tl.p0(t), p1 = tl.p1(t), j0 = p0 * eng.W, j1 = p1 * eng.W;
          T* acc = one_block ? rowbuf.data() : accbuf.data() + i0 * Np;
          if (one_block) init(i0, i1, acc, j0, j1);
          eng.run(i0, i1 - i0, 0, eng.Kp, acc, Np, p0, p1);
          if (one_block) finish(i0, i1, acc, j0, j1);
          check_interrupt_main();
        }
      });
    }
    if (!one_block)
      parallel_for(0, M, grain_for(N * 4), [&](int64_t lo, int64_t hi) {
        FpEnvGuard env;
        finish(lo, hi, accbuf.data() + lo * Np);
      });
  }
  return true;
}

}  // namespace

bool fast_values(const Params& P, const Tensor& a, const Tensor& b, const Tensor& c,
                 Tensor& out) {
  const FastKind kind = fast_eligible(P);
  if ((kind != FastKind::kFma && kind != FastKind::kFtz) || cpu_isa() == Isa::kScalar) return false;
  if (c.scalar_type() == ScalarType::Double) {
    if (kind != FastKind::kFma || a.scalar_type() != ScalarType::Double || b.scalar_type() != ScalarType::Double)
      return false;
    return run_values<double>(P, a, b, c, out);
  }
  if (a.scalar_type() != ScalarType::Float || b.scalar_type() != ScalarType::Float) return false;
  return run_values<float>(P, a, b, c, out);
}

// ---- ValuePanels ---------------------------------------------------------------------------
namespace {
// A and B packed into this thread's engine for T; nullptr where the engine does not serve P.
template <class T>
const void* pack_values(const Params& P, const Tensor& a, const Tensor& b) {
  thread_local ValuesEngine<T> eng;
  if (!eng.setup(P, cpu_isa())) return nullptr;
  eng.pack(P, a.const_data_ptr<T>(), a.stride(0), a.stride(1), b.const_data_ptr<T>(),
           b.stride(0), b.stride(1), a.size(0), b.size(1), 0, a.size(1), aten_par(a.size(1)));
  return &eng;
}
}  // namespace

bool ValuePanels::prepare(const Params& P, const Tensor& a, const Tensor& b) {
  const FastKind kind = fast_eligible(P);
  if ((kind != FastKind::kFma && kind != FastKind::kFtz) || cpu_isa() == Isa::kScalar)
    return false;
  f64_ = a.scalar_type() == ScalarType::Double;  // the fp64 FMA chain
  const ScalarType t = f64_ ? ScalarType::Double : ScalarType::Float;
  if (a.scalar_type() != t || b.scalar_type() != t) return false;
  pk_ = f64_ ? pack_values<double>(P, a, b) : pack_values<float>(P, a, b);
  return pk_ != nullptr;
}

int64_t ValuePanels::width() const {
  return f64_ ? static_cast<const ValuesEngine<double>*>(pk_)->Np
              : static_cast<const ValuesEngine<float>*>(pk_)->Np;
}

void ValuePanels::run(int64_t i0, int64_t i1, int64_t k0, int64_t k1, float* acc,
                      int64_t ld) const {
  STD_TORCH_CHECK(!f64_, "ValuePanels: fp32 values need an fp32 accumulator");
  if (k1 > k0) static_cast<const ValuesEngine<float>*>(pk_)->run(i0, i1 - i0, k0, k1, acc, ld);
}

void ValuePanels::run(int64_t i0, int64_t i1, int64_t k0, int64_t k1, double* acc,
                      int64_t ld) const {
  STD_TORCH_CHECK(f64_, "ValuePanels: fp64 values need an fp64 accumulator");
  if (k1 > k0) static_cast<const ValuesEngine<double>*>(pk_)->run(i0, i1 - i0, k0, k1, acc, ld);
}

}  // namespace mma
