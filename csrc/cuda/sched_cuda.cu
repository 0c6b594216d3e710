// CUDA kernel of mma_emu::_sched: one thread per output element runs the schedule
// interpreter (core/schedule.h), the same code as the CPU kernel.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "../sched.h"

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

at::Tensor sched_cuda(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                      const at::Tensor& partials, const c10::optional<at::Tensor>&,
                      const c10::optional<at::Tensor>&, const Params& P,
                      const at::Tensor& program, const SchedConsts& S) {
  const c10::cuda::CUDAGuard guard(c.device());
  const int64_t Bt = c.size(0), M = c.size(1), N = c.size(2);
  at::Tensor out = at::empty({Bt, M, N}, c.options().dtype(sched_out_dtype(P)));
  if (out.numel() == 0) return out;
  const at::Tensor prog = program.to(c.device());
  const int threads = 128;
  const int64_t blocks = (out.numel() + threads - 1) / threads;
  sched_kernel<<<unsigned(blocks), threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
      P, S, prog.data_ptr<int64_t>(), prog.numel(), view3(a), view3(b), view3(c),
      view3(partials), Bt, M, N, static_cast<uint8_t*>(out.data_ptr()),
      int(out.element_size()));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace mma

TORCH_LIBRARY_IMPL(mma_emu, CUDA, m) {
  m.impl("_sched", &mma::sched_entry<c10::DeviceType::CUDA, &mma::sched_cuda>);
}
