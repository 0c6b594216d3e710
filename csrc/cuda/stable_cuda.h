// The CUDA part of torch's stable ABI the kernels' host code uses: the device guard, the
// current stream and the launch check.  torch declares its CUDA shims under USE_CUDA:
// setup.py and scripts/check_cuda_compile.sh define it for nvcc.
#pragma once
#include <cuda_runtime.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/macros.h>

#include "../torch_stable.h"

#ifndef USE_CUDA
#error "compile the CUDA sources with -DUSE_CUDA (torch's stable CUDA shims)"
#endif

namespace mma {

// Sets the current CUDA device for a scope (c10::cuda::CUDAGuard before the port).
using CudaGuard = torch::stable::accelerator::DeviceGuard;

// torch's current stream on t's device: the kernels run in order with the caller's work.
inline cudaStream_t current_stream(const Tensor& t) {
  void* stream = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(
      aoti_torch_get_current_cuda_stream(int32_t(t.get_device_index()), &stream));
  return static_cast<cudaStream_t>(stream);
}

}  // namespace mma
