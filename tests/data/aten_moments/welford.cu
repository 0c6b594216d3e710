// WelfordOps of torch 2.13's ATen/native/SharedReduceOps.h (the header itself, from the
// installed wheel's include path) as std_var_kernel_impl instantiates it for float and
// half / bfloat16 inputs (float accumulator, int32 count), for nvcc -ptx with PyTorch's
// device flags: the committed welford_sm90.ptx shows the contractions the model
// (torch_mma_emu/aten_cuda/moments.py) follows; tests/test_aten_cuda_moments.py checks it.
#include <ATen/native/SharedReduceOps.h>
using Ops = at::native::WelfordOps<float, float, int32_t, thrust::pair<float, float>>;
using Acc = Ops::acc_t;
extern "C" __global__ void wreduce(const Acc* a, const float* x, Acc* o) {
  Ops ops(1.f, false); o[0] = ops.reduce(a[0], x[0], 0); }
extern "C" __global__ void wcombine(const Acc* a, const Acc* b, Acc* o) {
  Ops ops(1.f, false); o[0] = ops.combine(a[0], b[0]); }
extern "C" __global__ void wproject(const Acc* a, float c, bool s, float* o) {
  Ops ops(c, s); auto r = ops.project(a[0]); o[0] = r.first; o[1] = r.second; }
