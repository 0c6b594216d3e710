// The elementwise lambdas of PyTorch's CUDA kernels (ATen, torch 2.13), one kernel per op and
// dtype, for nvcc -ptx: scripts/regen_aten_math_ptx.py compiles this file with PyTorch's own
// device flags and c10's Half / BFloat16, so the PTX has the conversions and contractions of
// the real kernels.  Each lambda body is the expression of the .cu file named beside it
// (aten/src/ATen/native/cuda/); c10's compat:: wrappers call the same CUDA functions.
#define _USE_MATH_DEFINES
#include <cmath>
#include <c10/util/Half.h>
#include <c10/util/BFloat16.h>
#include <c10/cuda/CUDAMathCompat.h>
#include <ATen/OpMathType.h>

template <typename scalar_t, typename F>
__device__ __forceinline__ void apply(const scalar_t* in, scalar_t* out, F f) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = f(in[i]);
}

// UnaryOpsKernel.cu: exp_kernel_cuda
template <typename scalar_t> struct Exp {
  __device__ scalar_t operator()(scalar_t a) const { return std::exp(a); } };
// UnaryLogKernels.cu: log_kernel_cuda
template <typename scalar_t> struct Log {
  __device__ scalar_t operator()(scalar_t a) const { return ::log(a); } };
// UnaryGeometricTanhKernel.cu: tanh_kernel_cuda
template <typename scalar_t> struct Tanh {
  __device__ scalar_t operator()(scalar_t a) const { return ::tanh(a); } };
// UnarySpecialOpsKernel.cu: erf_kernel_cuda
template <typename scalar_t> struct Erf {
  __device__ scalar_t operator()(scalar_t a) const { return ::erf(a); } };
// UnaryOpsKernel.cu: rsqrt_kernel_cuda (rsqrt_wrapper)
template <typename scalar_t> struct Rsqrt {
  __device__ scalar_t operator()(scalar_t a) const { return ::rsqrt(a); } };
// UnarySpecialOpsKernel.cu: sigmoid_kernel_cuda
template <typename scalar_t> struct Sigmoid {
  __device__ scalar_t operator()(scalar_t a) const {
    return scalar_t{1} / (scalar_t{1} + std::exp(-a)); } };
// ActivationSiluKernel.cu: silu_kernel
template <typename scalar_t> struct Silu {
  __device__ scalar_t operator()(scalar_t x) const {
    using opmath_t = at::opmath_type<scalar_t>;
    const opmath_t x_acc = static_cast<opmath_t>(x);
    return x_acc / (opmath_t(1) + c10::cuda::compat::exp(-x_acc)); } };
// ActivationGeluKernel.cu: GeluCUDAKernelImpl, GeluType::None
template <typename scalar_t> struct Gelu {
  __device__ scalar_t operator()(scalar_t x) const {
    using opmath_t = at::opmath_type<scalar_t>;
    constexpr opmath_t kAlpha = M_SQRT1_2;
    return static_cast<opmath_t>(x) * opmath_t(0.5) *
           (opmath_t(1) + ::erf(static_cast<opmath_t>(x) * kAlpha)); } };
// ActivationGeluKernel.cu: GeluCUDAKernelImpl, GeluType::Tanh
template <typename scalar_t> struct GeluTanh {
  __device__ scalar_t operator()(scalar_t x) const {
    using opmath_t = at::opmath_type<scalar_t>;
    constexpr opmath_t kBeta = M_SQRT2 * M_2_SQRTPI * opmath_t(0.5);
    constexpr opmath_t kKappa = 0.044715;
    auto x_cube = static_cast<opmath_t>(x) * static_cast<opmath_t>(x) *
                  static_cast<opmath_t>(x);
    auto inner = kBeta * (static_cast<opmath_t>(x) + kKappa * x_cube);
    return opmath_t(0.5) * static_cast<opmath_t>(x) *
           (opmath_t(1) + c10::cuda::compat::tanh(inner)); } };

#define KERNELS(NAME, OP)                                                                   \
  extern "C" __global__ void NAME##_f32(const float* i, float* o) { apply(i, o, OP<float>()); } \
  extern "C" __global__ void NAME##_f16(const c10::Half* i, c10::Half* o) {               \
    apply(i, o, OP<c10::Half>()); }                                                       \
  extern "C" __global__ void NAME##_bf16(const c10::BFloat16* i, c10::BFloat16* o) {      \
    apply(i, o, OP<c10::BFloat16>()); }

KERNELS(exp, Exp)
KERNELS(log, Log)
KERNELS(tanh, Tanh)
KERNELS(erf, Erf)
KERNELS(rsqrt, Rsqrt)
KERNELS(sigmoid, Sigmoid)
KERNELS(silu, Silu)
KERNELS(gelu, Gelu)
KERNELS(gelu_tanh, GeluTanh)
