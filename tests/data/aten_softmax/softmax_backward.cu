// torch 2.13's persistent softmax backward (ATen/native/cuda/PersistentSoftmax.cuh, the
// header itself from the installed wheel) instantiated for rows of 64 fp32 / fp16 elements,
// and the block kernels' backward epilogues (SoftMax.cu: SoftMaxBackwardEpilogue,
// LogSoftMaxBackwardEpilogue, restated), for nvcc -ptx with PyTorch's device flags: the
// committed softmax_backward_sm90.ptx shows the contractions
// torch_mma_emu/aten_cuda/softmax_backward.py follows (tests/test_aten_softmax_backward.py).
#include <c10/util/Half.h>
#include <ATen/native/cuda/PersistentSoftmax.cuh>

namespace {
template __global__ void softmax_warp_backward<float, float, float, 6, false, false, 32>(
    float*, const float*, const float*, int, int, int, const bool*);
template __global__ void softmax_warp_backward<float, float, float, 6, true, false, 32>(
    float*, const float*, const float*, int, int, int, const bool*);
}

extern "C" __global__ void softmax_epilogue_f32(const float* g, const float* o, float sum,
                                                float* gi) {
  gi[0] = g[0] - o[0] * sum; }
extern "C" __global__ void log_softmax_epilogue_f32(const float* g, const float* o, float sum,
                                                    float* gi) {
  gi[0] = g[0] - std::exp(o[0]) * sum; }
