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
using SchedKernel = Tensor (*)(const Tensor& a, const Tensor& b, const Tensor& c,
                               const Tensor& partials, const OptTensor& sa, const OptTensor& sb,
                               const Params& P, const Tensor& program, const SchedConsts& S);
Tensor sched_cpu(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& partials,
                 const OptTensor& sa, const OptTensor& sb, const Params& P,
                 const Tensor& program, const SchedConsts& S);
Tensor sched_cuda(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& partials,
                  const OptTensor& sa, const OptTensor& sb, const Params& P,
                  const Tensor& program, const SchedConsts& S);

// Validated arguments for the kernel of device type `kernel` (checks in sched_ops.cpp).
Params checked_sched(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& partials,
                     const IntList& params, const IntList& program,
                     const std::vector<double>& consts, const OptTensor& sa,
                     const OptTensor& sb, torch::headeronly::DeviceType kernel,
                     SchedConsts* S);

inline ScalarType sched_out_dtype(const Params& P) {
  return P.rho == kRneFp64 ? ScalarType::Double
                           : (P.rho == kRneFp16 ? ScalarType::Half : ScalarType::Float);
}

// The op's entry for the kernel of device type D: the checks, then the kernel.
template <torch::headeronly::DeviceType D, SchedKernel Kernel>
Tensor sched_entry(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& partials,
                   const IntList& params, const IntList& program,
                   const std::vector<double>& consts, const OptTensor& sa,
                   const OptTensor& sb) {
  SchedConsts S;
  const Params P = checked_sched(a, b, c, partials, params, program, consts, sa, sb, D, &S);
  return Kernel(a, b, c, partials, sa, sb, P, long_tensor(program), S);
}

}  // namespace mma
