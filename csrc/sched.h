// Host-side declarations of the scheduled-product op mma_emu::_sched (csrc/sched_ops.cpp).
#pragma once
#include "core/schedule.h"
#include "gemm.h"

namespace mma {

// Operand source of one output element for the interpreter (csrc/core/schedule.h).
struct SchedSrc {
  View3 a, b;  // a: (batch, M, K), b: (batch, K, N)
  int64_t bi, i, j;
  MMA_HD uint64_t ak(int64_t k) const { return a.at(bi, i, k); }
  MMA_HD uint64_t bk(int64_t k) const { return b.at(bi, k, j); }
};

// Exact value of an output-format element (C, the partials: _gemm results).
struct OutAt {
  View3 v;
  int32_t rho;
  FormatDesc fo;
  int64_t Bt, bi, i, j;
  MMA_HD double operator()() const { return out_value(rho, fo, v.at(bi, i, j)); }
  MMA_HD double operator()(int64_t s) const { return out_value(rho, fo, v.at(s * Bt + bi, i, j)); }
};

// Program properties the CPU kernel dispatches on (cpu/sched_cpu.cpp): it holds a CHAIN op;
// it runs row-wise (fp32 / fp16 / fp64 output, either workspace, no NODE, shallow stack).
bool sched_has_chain(const int64_t* prog, int64_t len);
bool sched_rowwise(const Params& P, const SchedConsts& S, const int64_t* prog, int64_t len);

// The kernels (sa, sb: the scales of CHAIN programs; the CUDA kernel runs none).
at::Tensor sched_cpu(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                     const at::Tensor& partials, const c10::optional<at::Tensor>& sa,
                     const c10::optional<at::Tensor>& sb, const Params& P,
                     const at::Tensor& program, const SchedConsts& S);
at::Tensor sched_cuda(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                      const at::Tensor& partials, const c10::optional<at::Tensor>& sa,
                      const c10::optional<at::Tensor>& sb, const Params& P,
                      const at::Tensor& program, const SchedConsts& S);

// Validated arguments for the kernel of device type `kernel` (checks in sched_ops.cpp).
Params checked_sched(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                     const at::Tensor& partials, at::IntArrayRef params, at::IntArrayRef program,
                     at::ArrayRef<double> consts, const c10::optional<at::Tensor>& sa,
                     const c10::optional<at::Tensor>& sb, c10::DeviceType kernel,
                     SchedConsts* S);

inline at::ScalarType sched_out_dtype(const Params& P) {
  return P.rho == kRneFp64 ? at::kDouble : (P.rho == kRneFp16 ? at::kHalf : at::kFloat);
}

// The op's entry for the kernel of device type D: the checks, then the kernel.
using SchedKernel = at::Tensor (*)(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                   const at::Tensor&, const c10::optional<at::Tensor>&,
                                   const c10::optional<at::Tensor>&, const Params&,
                                   const at::Tensor&, const SchedConsts&);
template <c10::DeviceType D, SchedKernel Kernel>
at::Tensor sched_entry(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                       const at::Tensor& partials, at::IntArrayRef params, at::IntArrayRef program,
                       at::ArrayRef<double> consts, const c10::optional<at::Tensor>& sa,
                       const c10::optional<at::Tensor>& sb) {
  SchedConsts S;
  const Params P = checked_sched(a, b, c, partials, params, program, consts, sa, sb, D, &S);
  return Kernel(a, b, c, partials, sa, sb, P, at::tensor(program, at::kLong), S);
}

}  // namespace mma
