// The arithmetic core of torch 2.13's CUDA layer_norm backward for the input gradient
// (aten/src/ATen/native/cuda/layer_norm_kernel.cu: layer_norm_grad_input_kernel[_vectorized]
// <T, float, rms_norm = false>), one thread's accumulation step and one dX element, for
// nvcc -ptx with PyTorch's device flags: which multiply-add pairs nvcc 13.0 contracts.
// Models: torch_mma_emu/aten_cuda/norms_backward.py.
#include <c10/util/Half.h>
#include <c10/util/BFloat16.h>

// the per-element accumulation of the first pass (the expressions of the kernel's loop)
template <typename T>
__device__ void stats_step(const T* dy, const T* x, const T* gamma, float mean, float rstd,
                           float* s1, float* s2) {
  unsigned i = threadIdx.x;
  const float g = static_cast<float>(gamma[i]);
  const float h = static_cast<float>(x[i]);
  const float l = static_cast<float>(dy[i]);
  float a = s1[i], b = s2[i];
  a += l * g;
  b += l * g * (h - mean) * rstd;
  s1[i] = a; s2[i] = b;
}

// the second pass: one element of dX
template <typename T>
__device__ void grad_elem(const T* dy, const T* x, const T* gamma, float mean, float rstd,
                          float sx1, float sx2, int N, T* dx) {
  unsigned i = threadIdx.x;
  const float fH = N;
  const float term1 = (float(1) / fH) * rstd;
  const float g = static_cast<float>(gamma[i]);
  const float xv = static_cast<float>(x[i]);
  const float d = static_cast<float>(dy[i]);
  float f = fH * g * d;
  f -= (xv - mean) * rstd * sx2;
  f -= sx1;
  f *= term1;
  dx[i] = f;
}

#define INST(T, S) \
extern "C" __global__ void ln_bw_stats_##S(const T* dy, const T* x, const T* g, float m, \
    float r, float* s1, float* s2) { stats_step<T>(dy, x, g, m, r, s1, s2); } \
extern "C" __global__ void ln_bw_dx_##S(const T* dy, const T* x, const T* g, float m, \
    float r, float a, float b, int N, T* dx) { grad_elem<T>(dy, x, g, m, r, a, b, N, dx); }
INST(float, f32)
INST(c10::Half, f16)
INST(c10::BFloat16, bf16)
