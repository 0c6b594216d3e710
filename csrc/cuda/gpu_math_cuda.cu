// CUDA kernel of mma_emu::_gpu_math: the models of core/gpu_math.h (the same code as the CPU
// kernel, one thread per element), so a CUDA tensor gets the modelled bits too (the MUFU
// tables' rows copied to its device; the squarer's dropped bits computed, not tabulated).
#include "../gpu_math_ops.h"
#include "stable_cuda.h"

namespace mma {
namespace {

__global__ void gpu_math_kernel(int code, const float* in, float* out, int64_t n,
                                gm::MufuTables T) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = gm::apply(code, in[i], T);
}

Tensor gpu_math_cuda(const Tensor& x, std::string op, const Tensor& tables) {
  MMA_CHECK_VALUE(x.scalar_type() == ScalarType::Float && x.is_contiguous(),
                  "_gpu_math: x must be a contiguous float32 tensor");
  const int code = gm_code(op);
  MMA_CHECK_VALUE(tables.is_cpu(), "_gpu_math: tables must be a CPU tensor (copied to x's "
                                   "device here)");
  check_tables(tables);
  const CudaGuard guard(x.get_device_index());
  Tensor out = torch::stable::empty_like(x);
  if (x.numel() == 0) return out;
  const Tensor rows = torch::stable::to(tables, x.device());
  const gm::MufuTables T = mufu_tables(rows.const_data_ptr<int64_t>(),
                                       tables.const_data_ptr<int64_t>());
  const int threads = 256;
  const int64_t blocks = (x.numel() + threads - 1) / threads;
  gpu_math_kernel<<<unsigned(blocks), threads, 0, current_stream(x)>>>(
      code, x.const_data_ptr<float>(), out.mutable_data_ptr<float>(), x.numel(), T);
  STD_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace
}  // namespace mma

STABLE_TORCH_LIBRARY_IMPL(mma_emu, CUDA, m) {
  m.impl("_gpu_math", TORCH_BOX(&mma::gpu_math_cuda));
}
