// CPU kernel of mma_emu::_sched: the schedule interpreter (core/schedule.h) per output
// element, parallel over rows.  Straight-line fp32 programs (the split-K / promotion
// reductions and epilogues: no NODE) run row-wise instead, see run_rows.
#include <ATen/Parallel.h>

#include <cmath>
#include <vector>

#include "../sched.h"
#include "fpenv.h"

namespace mma {
namespace {

// A program the row-wise path runs: fp32 workspace, fp32 output and partials, no NODE
// (whose operands would need decoding per element).
bool rowwise_program(const Params& P, const SchedConsts& S, const int64_t* prog, int64_t len) {
  if (S.ws64 || !(P.rho == kRzFp32 || P.rho == kRzE8m13 || P.rho == kRneFp32)) return false;
  int sp = 0, depth = 0;
  for (int64_t pc = 0; pc < len;) {
    switch (prog[pc]) {
      case kSPartial: ++sp; pc += 2; break;
      case kSC: case kSZero: ++sp; pc += 1; break;
      case kSAdd: --sp; pc += 1; break;
      case kSEpiAlpha: case kSEpiFma: case kSEpiMulAdd: pc += 1; break;
      default: return false;  // kSNode
    }
    depth = sp > depth ? sp : depth;
  }
  return depth <= kSchedStack;
}

// The same IEEE fp32 operations as run_schedule, in the same order, one op at a time over a
// row of N outputs (loops the compiler vectorises; -ffp-contract=off keeps mul and add
// separate).  In an fp32 workspace ws_round is the identity on fp32 values and ws_mul /
// ws_fma round alpha and beta to fp32 first, as here.
void run_rows(const Params& P, const SchedConsts& S, const int64_t* prog, int64_t len,
              const View3& vc, const View3& vp, int64_t Bt, int64_t M, int64_t N,
              uint32_t* out) {
  const float alpha = float(S.alpha), beta = float(S.beta);
  const uint32_t nan = uint32_t(P.nan_bits);
  at::parallel_for(0, Bt * M, 1, [&](int64_t lo, int64_t hi) {
    FpEnvGuard guard;
    std::vector<float> buf(size_t(kSchedStack + 1) * size_t(N));
    std::vector<float> cb(static_cast<size_t>(N));
    auto row = [&](int d) { return buf.data() + size_t(d) * size_t(N); };
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t bi = r / M, i = r % M;
      bool have_c = false;
      auto load_c = [&]() {
        if (!have_c)
          for (int64_t j = 0; j < N; ++j) cb[size_t(j)] = f32_of(uint32_t(vc.at(bi, i, j)));
        have_c = true;
        return cb.data();
      };
      int sp = 0;
      for (int64_t pc = 0; pc < len;) {
        switch (prog[pc]) {
          case kSPartial: {
            float* t = row(sp++);
            const int64_t s = prog[pc + 1];
            for (int64_t j = 0; j < N; ++j) t[j] = f32_of(uint32_t(vp.at(s * Bt + bi, i, j)));
            pc += 2;
            break;
          }
          case kSC: {
            const float* c = load_c();
            float* t = row(sp++);
            for (int64_t j = 0; j < N; ++j) t[j] = c[j];
            pc += 1;
            break;
          }
          case kSZero: {
            float* t = row(sp++);
            for (int64_t j = 0; j < N; ++j) t[j] = 0.0f;
            pc += 1;
            break;
          }
          case kSAdd: {
            float* x = row(sp - 2);
            const float* y = row(sp - 1);
            for (int64_t j = 0; j < N; ++j) x[j] = x[j] + y[j];
            --sp;
            pc += 1;
            break;
          }
          case kSEpiAlpha: {
            float* x = row(sp - 1);
            for (int64_t j = 0; j < N; ++j) x[j] = alpha * x[j];
            pc += 1;
            break;
          }
          case kSEpiFma: {
            float* x = row(sp - 1);
            const float* c = load_c();
            for (int64_t j = 0; j < N; ++j) x[j] = std::fma(alpha, x[j], beta * c[j]);
            pc += 1;
            break;
          }
          default: {  // kSEpiMulAdd
            float* x = row(sp - 1);
            const float* c = load_c();
            for (int64_t j = 0; j < N; ++j) {
              const float ax = alpha * x[j], bc = beta * c[j];
              x[j] = ax + bc;
            }
            pc += 1;
            break;
          }
        }
      }
      const float* t = row(0);
      uint32_t* o = out + r * N;
      for (int64_t j = 0; j < N; ++j) o[j] = is_nan(t[j]) ? nan : bits_of(t[j]);
    }
  });
}

}  // namespace

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
  if (oes == 4 && c.element_size() == 4 && (partials.numel() == 0 || partials.element_size() == 4) &&
      rowwise_program(P, S, prog, len)) {
    run_rows(P, S, prog, len, vc, vp, Bt, M, N, reinterpret_cast<uint32_t*>(obase));
    return out;
  }
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
