// The elementwise backward lambdas of PyTorch's CUDA kernels (ATen, torch 2.13), one kernel
// per op and dtype, for nvcc -ptx: scripts/regen_aten_math_ptx.py --backward compiles this
// file with PyTorch's device flags and c10's Half / BFloat16 into aten_math_backward_sm90.ptx
// and runs it against torch_mma_emu/aten_cuda/backward.py.  Each body is the expression of
// the .cu file named beside it (aten/src/ATen/native/cuda/).
#define _USE_MATH_DEFINES
#include <cmath>
#include <c10/util/Half.h>
#include <c10/util/BFloat16.h>
#include <c10/cuda/CUDAMathCompat.h>
#include <ATen/OpMathType.h>

template <typename scalar_t, typename F>
__device__ __forceinline__ void apply2(const scalar_t* a, const scalar_t* b, scalar_t* out,
                                       F f) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = f(a[i], b[i]);
}

// BinaryMiscBackwardOpsKernels.cu: sigmoid_backward_kernel_cuda (a = grad, b = output)
template <typename scalar_t> struct SigmoidBackward {
  __device__ scalar_t operator()(scalar_t a, scalar_t b) const {
    return a * (scalar_t(1.) - b) * b; } };
// BinaryMiscBackwardOpsKernels.cu: tanh_backward_kernel_cuda (a = grad, b = output)
template <typename scalar_t> struct TanhBackward {
  __device__ scalar_t operator()(scalar_t a, scalar_t b) const {
    return a * (scalar_t{1.} - b * b); } };
// ActivationSiluKernel.cu: silu_backward_kernel
template <typename scalar_t> struct SiluBackward {
  __device__ scalar_t operator()(scalar_t dy, scalar_t x) const {
    using opmath_t = at::opmath_type<scalar_t>;
    const opmath_t dy_acc = static_cast<opmath_t>(dy);
    const opmath_t x_acc = static_cast<opmath_t>(x);
    const opmath_t s_acc = opmath_t(1) / (opmath_t(1) + c10::cuda::compat::exp(-x_acc));
    return dy_acc * s_acc * (opmath_t(1) + x_acc * (opmath_t(1) - s_acc)); } };
// ActivationGeluKernel.cu: GeluBackwardCUDAKernelImpl, GeluType::None
template <typename scalar_t> struct GeluBackward {
  __device__ scalar_t operator()(scalar_t dy, scalar_t x) const {
    using opmath_t = at::opmath_type<scalar_t>;
    constexpr opmath_t kBeta = M_2_SQRTPI * M_SQRT1_2 * opmath_t(0.5);
    constexpr opmath_t kAlpha = M_SQRT1_2;
    const opmath_t cdf =
        opmath_t(0.5) * (opmath_t(1) + ::erf(static_cast<opmath_t>(x) * kAlpha));
    const opmath_t pdf =
        c10::cuda::compat::exp(
            opmath_t(-0.5) * static_cast<opmath_t>(x) * static_cast<opmath_t>(x)) *
        kBeta;
    return static_cast<opmath_t>(dy) * (cdf + static_cast<opmath_t>(x) * pdf); } };
// ActivationGeluKernel.cu: GeluBackwardCUDAKernelImpl, GeluType::Tanh
template <typename scalar_t> struct GeluTanhBackward {
  __device__ scalar_t operator()(scalar_t dy, scalar_t x) const {
    using opmath_t = at::opmath_type<scalar_t>;
    constexpr opmath_t kBeta = M_SQRT2 * M_2_SQRTPI * opmath_t(0.5);
    constexpr opmath_t kKappa = 0.044715;
    auto x_sq = static_cast<opmath_t>(x) * static_cast<opmath_t>(x);
    auto x_cube = x_sq * static_cast<opmath_t>(x);
    auto inner = kBeta * (static_cast<opmath_t>(x) + kKappa * x_cube);
    auto tanh_inner = c10::cuda::compat::tanh(inner);
    auto left = opmath_t(0.5) * static_cast<opmath_t>(x);
    auto right = opmath_t(1) + tanh_inner;
    auto left_derivative = opmath_t(0.5) * right;
    auto tanh_derivative = opmath_t(1) - tanh_inner * tanh_inner;
    auto inner_derivative = kBeta * (opmath_t(1) + opmath_t(3) * kKappa * x_sq);
    auto right_derivative = left * tanh_derivative * inner_derivative;
    return static_cast<opmath_t>(dy) * (left_derivative + right_derivative); } };

#define KERNELS2(NAME, OP)                                                                  \
  extern "C" __global__ void NAME##_f32(const float* a, const float* b, float* o) {        \
    apply2(a, b, o, OP<float>()); }                                                         \
  extern "C" __global__ void NAME##_f16(const c10::Half* a, const c10::Half* b,            \
                                        c10::Half* o) { apply2(a, b, o, OP<c10::Half>()); } \
  extern "C" __global__ void NAME##_bf16(const c10::BFloat16* a, const c10::BFloat16* b,   \
                                         c10::BFloat16* o) {                                \
    apply2(a, b, o, OP<c10::BFloat16>()); }

KERNELS2(sigmoid_backward, SigmoidBackward)
KERNELS2(tanh_backward, TanhBackward)
KERNELS2(silu_backward, SiluBackward)
KERNELS2(gelu_backward, GeluBackward)
KERNELS2(gelu_tanh_backward, GeluTanhBackward)
