// CUDA kernel of mma_emu::_sched: one thread per output element runs the schedule
// interpreter (core/schedule.h), the same code as the CPU kernel.
#include "../sched.h"
#include "stable_cuda.h"

namespace mma {
namespace {

__global__ void sched_kernel(Params P, SchedConsts S, const int64_t* prog, int64_t len,
                             View3 a, View3 b, View3 c, View3 part, int64_t Bt, int64_t M,
                             int64_t N, uint8_t* out, int oes) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= Bt * M * N) return;
  const int64_t bi = t / (M * N), i = (t / N) % M, j = t % N;
  const SchedSrc src{a, b, bi, i, j};
  const OutAt partial{part, P.rho, P.fo, Bt, bi, i, j};
  const OutAt cval{c, P.rho, P.fo, Bt, bi, i, j};
  const uint64_t v = run_schedule(P, S, prog, len, src, partial, cval);
  uint8_t* p = out + t * oes;
  if (oes == 2) *reinterpret_cast<uint16_t*>(p) = uint16_t(v);
  else if (oes == 4) *reinterpret_cast<uint32_t*>(p) = uint32_t(v);
  else *reinterpret_cast<uint64_t*>(p) = v;
}

}  // namespace

Tensor sched_cuda(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& partials,
                  const OptTensor&, const OptTensor&, const Params& P, const Tensor& program,
                  const SchedConsts& S) {
  const CudaGuard guard(c.get_device_index());
  const int64_t Bt = c.size(0), M = c.size(1), N = c.size(2);
  Tensor out = torch::stable::new_empty(c, {Bt, M, N}, sched_out_dtype(P));
  if (out.numel() == 0) return out;
  const Tensor prog = torch::stable::to(program, c.device());
  const int threads = 128;
  const int64_t blocks = (out.numel() + threads - 1) / threads;
  sched_kernel<<<unsigned(blocks), threads, 0, current_stream(c)>>>(
      P, S, prog.const_data_ptr<int64_t>(), prog.numel(), view3(a), view3(b), view3(c),
      view3(partials), Bt, M, N, static_cast<uint8_t*>(out.data_ptr()),
      int(out.element_size()));
  STD_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

Tensor sched_cuda_entry(const Tensor& a, const Tensor& b, const Tensor& c,
                        const Tensor& partials, const IntList& params, const IntList& program,
                        const std::vector<double>& consts, const OptTensor& sa,
                        const OptTensor& sb) {
  return sched_entry<torch::headeronly::DeviceType::CUDA, &sched_cuda>(
      a, b, c, partials, params, program, consts, sa, sb);
}

}  // namespace mma

STABLE_TORCH_LIBRARY_IMPL(mma_emu, CUDA, m) { m.impl("_sched", TORCH_BOX(&mma::sched_cuda_entry)); }
