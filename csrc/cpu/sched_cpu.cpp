// CPU kernel of mma_emu::_sched: the schedule interpreter (core/schedule.h) per output
// element, parallel over rows.
#include <ATen/Parallel.h>

#include "../sched.h"
#include "fpenv.h"

namespace mma {

at::Tensor sched_cpu(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                     const at::Tensor& partials, const Params& P, const at::Tensor& program,
                     const SchedConsts& S) {
  const int64_t Bt = c.size(0), M = c.size(1), N = c.size(2);
  at::Tensor out = at::empty({Bt, M, N}, c.options().dtype(sched_out_dtype(P)));
  if (out.numel() == 0) return out;
  const View3 va = view3(a), vb = view3(b), vc = view3(c), vp = view3(partials);
  const int64_t* prog = program.data_ptr<int64_t>();
  const int64_t len = program.numel();
  const int oes = int(out.element_size());
  uint8_t* obase = static_cast<uint8_t*>(out.data_ptr());
  at::parallel_for(0, Bt * M, 1, [&](int64_t lo, int64_t hi) {
    FpEnvGuard guard;  // IEEE additions and conversions on the host FPU
    for (int64_t r = lo; r < hi; ++r) {
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
    }
  });
  return out;
}

}  // namespace mma
