// Argument checks of mma_emu::_sched (its schema and CPU entry: ops.cpp): a schedule
// program (split-K, promotion, epilogue, or an FPRev tree).  torch_mma_emu/schedule.py
// builds the program; the chains of split-K slices and promotion blocks are CHAIN ops (CPU)
// or come from _gemm as PARTIALs.
#include <numeric>

#include "sched.h"

namespace mma {

namespace {
// Walks the program once: every op known, indices in range, the stack never under- or
// overflows and holds one value at the end.
void check_program(const IntList& prog, const Params& P, int64_t K, int64_t S) {
  int depth = 0;
  const int64_t len = int64_t(prog.size());
  auto need = [&](int64_t pc, int64_t n) {
    MMA_CHECK_VALUE(pc + n <= len, "_sched: program truncated at ", pc);
  };
  for (int64_t pc = 0; pc < len;) {
    const int64_t op = prog[pc];
    switch (op) {
      case kSPartial:
        need(pc, 2);
        MMA_CHECK_VALUE(prog[pc + 1] >= 0 && prog[pc + 1] < S, "_sched: partial index ",
                        prog[pc + 1], " out of range (", S, " partials)");
        ++depth; pc += 2; break;
      case kSC: case kSZero: ++depth; pc += 1; break;
      case kSAdd:
        MMA_CHECK_VALUE(depth >= 2, "_sched: ADD needs two values at ", pc);
        --depth; pc += 1; break;
      case kSNode: {
        need(pc, 4);
        const int64_t n = prog[pc + 1], acc = prog[pc + 2], w = prog[pc + 3];
        MMA_CHECK_VALUE(n >= 1 && w >= n && w <= kSchedMaxWidth, "_sched: bad node size");
        if (P.op == kFma) MMA_CHECK_VALUE(w == 1, "_sched: fma nodes take one product");
        if (P.op == kFtzAddMul) MMA_CHECK_VALUE(w % P.P == 0, "_sched: ftz node width");
        MMA_CHECK_VALUE(P.op != kStFdpa && P.op != kGstFdpa,
                        "_sched: block-scaled ops cannot run tree nodes");
        need(pc, 4 + 2 * n);
        for (int64_t t = 0; t < n; ++t) {
          MMA_CHECK_VALUE(prog[pc + 4 + 2 * t] >= 0 && prog[pc + 4 + 2 * t] < K,
                          "_sched: node product index out of range");
          MMA_CHECK_VALUE(prog[pc + 5 + 2 * t] >= 0 && prog[pc + 5 + 2 * t] < w,
                          "_sched: node slot out of range");
        }
        if (acc) MMA_CHECK_VALUE(depth >= 1, "_sched: node accumulator missing at ", pc);
        depth += acc ? 0 : 1;
        pc += 4 + 2 * n;
        break;
      }
      case kSChain: {
        need(pc, 4);
        const int64_t k0 = prog[pc + 1], k1 = prog[pc + 2], c = prog[pc + 3];
        // an empty range (K shorter than the split) is C or +0; unscaled chains may start
        // and end off the instruction grid (a residue tile: groups counted from k0)
        MMA_CHECK_VALUE(0 <= k0 && k0 <= k1 && k1 <= K && c >= 0 && c <= 2,
                        "_sched: CHAIN [", k0, ", ", k1, ") must lie in [0, ", K,
                          "] with flag 0, 1 or 2");
        if (P.op == kStFdpa || P.op == kGstFdpa)
          MMA_CHECK_VALUE(k0 == k1 || (k0 % P.L == 0 && k0 % P.block == 0 &&
                                       (k1 % P.L == 0 || k1 == K)),
                          "_sched: CHAIN [", k0, ", ", k1, ") of a block-scaled op must "
                            "start on the instruction's K (", P.L, ") and a scale block (",
                            P.block, ")");
        MMA_CHECK_VALUE(!P.epilogue, "_sched: CHAIN takes chain-mode parameters");
        if (c == 2) MMA_CHECK_VALUE(depth >= 1, "_sched: CHAIN flag 2 needs a value at ", pc);
        depth += c == 2 ? 0 : 1;
        pc += 4; break;
      }
      case kSChains: {
        need(pc, 4);
        const int64_t k0 = prog[pc + 1], k1 = prog[pc + 2], s = prog[pc + 3];
        const int64_t grid = (P.op == kStFdpa || P.op == kGstFdpa) ? std::lcm<int64_t>(P.L, P.block)
                                                                   : int64_t(P.L);
        MMA_CHECK_VALUE(0 <= k0 && k0 <= k1 && k1 <= K && s >= 1 &&
                            (k0 == k1 || (k0 % grid == 0 && s % grid == 0 &&
                                          (k1 % P.L == 0 || k1 == K))),
                        "_sched: CHAINS [", k0, ", ", k1, ") step ", s, " must lie in [0, ", K,
                          ") with start and step on multiples of ", grid,
                          " (the instruction's K and the scale block)");
        MMA_CHECK_VALUE(!P.epilogue, "_sched: CHAINS takes chain-mode parameters");
        MMA_CHECK_VALUE(depth >= 1, "_sched: CHAINS needs a value at ", pc);
        MMA_CHECK_VALUE(depth + 1 <= kSchedStack, "_sched: program needs more than ",
                        kSchedStack, " stack entries");
        pc += 4;
        break;
      }
      case kSEpiAlpha: case kSEpiFma: case kSEpiMulAdd:
        MMA_CHECK_VALUE(depth >= 1, "_sched: epilogue needs a value");
        pc += 1; break;
      default: MMA_CHECK_VALUE(false, "_sched: unknown program op ", op, " at ", pc);
    }
    MMA_CHECK_VALUE(depth <= kSchedStack, "_sched: program needs more than ", kSchedStack,
                    " stack entries");
  }
  MMA_CHECK_VALUE(depth == 1, "_sched: program leaves ", depth, " values (expected 1)");
}
}  // namespace

Params checked_sched(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& partials,
                     const IntList& params, const IntList& program,
                     const std::vector<double>& consts, const OptTensor& sa,
                     const OptTensor& sb, torch::headeronly::DeviceType kernel,
                     SchedConsts* S) {
  MMA_CHECK_VALUE(params.size() == size_t(kNumParams), "_sched: expected ", kNumParams,
                  " parameters, got ", params.size());
  const Params P = parse_params(params.data());
  MMA_CHECK_VALUE(a.dim() == 3 && b.dim() == 3 && c.dim() == 3 && partials.dim() == 3,
                  "_sched: a, b, c, partials must be 3-D");
  const int64_t Bt = c.size(0), M = c.size(1), N = c.size(2);
  MMA_CHECK_VALUE(a.size(0) == Bt && b.size(0) == Bt && a.size(1) == M && b.size(2) == N &&
                      a.size(2) == b.size(1),
                  "_sched: a ", shape_of(a), ", b ", shape_of(b), " and c ", shape_of(c),
                  " do not fit");
  MMA_CHECK_VALUE(partials.size(1) == M && partials.size(2) == N &&
                      (Bt == 0 || partials.size(0) % Bt == 0),
                  "_sched: partials must have shape (S * batch, M, N)");
  const auto odt = sched_out_dtype(P);
  MMA_CHECK_VALUE(c.scalar_type() == odt && partials.scalar_type() == odt,
                  "_sched: c and partials must have the output dtype ", odt);
  MMA_CHECK_VALUE(same_device(a, b) && same_device(a, c) && same_device(a, partials),
                  "_sched: tensors on different devices");
  MMA_CHECK_VALUE(a.element_size() <= 8 && b.element_size() <= 8, "_sched: codes up to 64 bits");
  if (P.op == kFma || P.op == kFtzAddMul) {
    const auto want = P.rho == kRneFp64 ? ScalarType::Double : ScalarType::Float;
    MMA_CHECK_VALUE(a.size(2) == 0 || (a.scalar_type() == want && b.scalar_type() == want),
                    "_sched: fma/ftz_addmul take ", want, " values");
  }
  MMA_CHECK_VALUE(consts.size() == 3, "_sched: consts are (workspace, alpha, beta)");
  MMA_CHECK_VALUE(consts[0] == 0.0 || consts[0] == 1.0, "_sched: workspace code 0 or 1");
  S->ws64 = consts[0] == 1.0 ? 1 : 0;
  S->alpha = consts[1];
  S->beta = consts[2];
  check_program(program, P, a.size(2), Bt ? partials.size(0) / Bt : 0);
  const bool cpu = kernel == torch::headeronly::DeviceType::CPU;
  MMA_CHECK_VALUE(c.device().type() == kernel, "_sched (", cpu ? "CPU" : "CUDA",
                " kernel) got a ", device_name(c.device()), " tensor");
  // scales go with CHAIN ops (the chains' operands); a PARTIAL program takes none
  if (sched_has_chain(program.data(), int64_t(program.size()))) {
    check_scales("_sched", a, b, sa, sb, P);
    MMA_CHECK_VALUE(cpu,
                    "_sched: CHAIN programs run on the CPU kernel only (on CUDA the chains "
                    "come from _gemm as PARTIALs)");
    MMA_CHECK_VALUE(sched_rowwise(P, *S, program.data(), int64_t(program.size())),
                    "_sched: CHAIN programs need an fp32, fp16 or fp64 output and no tree "
                    "NODEs");
  } else {
    MMA_CHECK_VALUE(!sa.has_value() && !sb.has_value(),
                    "_sched: scales go with CHAIN programs only");
  }
  return P;
}

}  // namespace mma
