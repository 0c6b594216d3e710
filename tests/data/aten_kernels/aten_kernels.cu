// ATen's CUDA kernels as torch 2.13.0 instantiates them, compiled from the headers of the
// installed torch wheel (Reduce.cuh, SharedReduceOps.h, PersistentSoftmax.cuh): nothing of
// ATen is copied here, only the template arguments that libtorch_cuda.so's kernel names
// carry (torch_mma_emu/aten_cuda/sass_facts.json) and the one-line reduction functors of
// ReduceSumProdKernel.cu / ReduceMomentKernel.cu, which are .cu files the wheel does not ship.
// scripts/regen_aten_kernel_ptx.py compiles this to sm_90 PTX with torch's device flags and
// writes the PTX gzipped next to this file; tests run it in torch_mma_emu.ptx.
#include <ATen/native/cuda/Reduce.cuh>
#include <ATen/native/SharedReduceOps.h>
#include <ATen/native/cuda/PersistentSoftmax.cuh>
#include <cstddef>

using namespace at::native;

// sum_functor<scalar_t, acc_t = float, out_t = scalar_t>: func_wrapper<out_t> of a GPU lambda
// (acc_t a, acc_t b) -> a + b (ReduceSumProdKernel.cu); here a named functor with that body.
struct SumCombine {
  __device__ float operator()(float a, float b) const { return a + b; }
};

template <typename scalar_t>
using SumR = ReduceOp<scalar_t, func_wrapper_t<scalar_t, SumCombine>, uint32_t, scalar_t, 4,
                      std::is_same_v<scalar_t, float> ? 4 : 8>;
template <typename scalar_t>
using MeanR = ReduceOp<scalar_t, MeanOps<scalar_t, float, float, scalar_t>, uint32_t, scalar_t,
                       4, std::is_same_v<scalar_t, float> ? 4 : 8>;

// launch_reduce_kernel<512>: reduce_kernel<512 / ovs, ovs, R> for output_vec_size ovs = 1, 2, 4
#define KERNEL(NT, OVS, R) \
  namespace at::native { template __global__ void reduce_kernel<NT, OVS, R>(R); }
#define REDUCE(NAME, R)                                                                    \
  extern "C" __global__ void NAME##_layout(unsigned long long* o) {                         \
    o[0] = sizeof(R); o[1] = offsetof(R, ops); o[2] = offsetof(R, ident);                  \
    o[3] = offsetof(R, config); o[4] = offsetof(R, input_calc);                            \
    o[5] = offsetof(R, output_calc); o[6] = offsetof(R, src); o[7] = offsetof(R, dst);     \
    o[8] = offsetof(R, acc_buf); o[9] = offsetof(R, cta_buf);                              \
    o[10] = offsetof(R, semaphores); o[11] = offsetof(R, base_idx);                        \
    o[12] = offsetof(R, accumulate); o[13] = offsetof(R, final_output);                    \
    o[14] = offsetof(R, noutputs);                                                         \
    o[15] = offsetof(ReduceConfig, element_size_bytes);                                    \
    o[16] = offsetof(ReduceConfig, num_inputs); o[17] = offsetof(ReduceConfig, num_outputs); \
    o[18] = offsetof(ReduceConfig, step_input); o[19] = offsetof(ReduceConfig, step_output); \
    o[20] = offsetof(ReduceConfig, ctas_per_output);                                       \
    o[21] = offsetof(ReduceConfig, input_mult); o[22] = offsetof(ReduceConfig, output_mult); \
    o[23] = offsetof(ReduceConfig, block_width); o[24] = offsetof(ReduceConfig, block_height); \
    o[25] = offsetof(ReduceConfig, num_threads);                                           \
    o[26] = offsetof(ReduceConfig, vectorize_input);                                       \
    o[27] = offsetof(ReduceConfig, output_vec_size); o[28] = sizeof(ReduceConfig);         \
    using IC = typename R::InputCalculator; using OC = typename R::OutputCalculator;       \
    o[29] = offsetof(IC, dims); o[30] = offsetof(IC, sizes_); o[31] = offsetof(IC, strides_); \
    o[32] = sizeof(IC); o[33] = offsetof(OC, dims); o[34] = offsetof(OC, sizes_);           \
    o[35] = offsetof(OC, strides_); o[36] = sizeof(OC); o[37] = MAX_DIMS;                  \
  }

REDUCE(sum_f32, SumR<float>)
REDUCE(sum_f16, SumR<c10::Half>)
REDUCE(sum_bf16, SumR<c10::BFloat16>)
REDUCE(mean_f32, MeanR<float>)
REDUCE(mean_f16, MeanR<c10::Half>)
REDUCE(mean_bf16, MeanR<c10::BFloat16>)
#define ALL_VECS(R) KERNEL(512, 1, R) KERNEL(256, 2, R) KERNEL(128, 4, R)
ALL_VECS(SumR<float>) ALL_VECS(SumR<c10::Half>) ALL_VECS(SumR<c10::BFloat16>)
ALL_VECS(MeanR<float>) ALL_VECS(MeanR<c10::Half>) ALL_VECS(MeanR<c10::BFloat16>)

// host_softmax (SoftMax.cu) for rows of at most 2048 elements and 8192 bytes:
// dispatch_softmax_forward<scalar_t, scalar_t, float, is_log_softmax, false>, which launches
// softmax_warp_forward<scalar_t, scalar_t, float, log2_elements, is_log_softmax, false, 32>
// (a selection of log2_elements; the kernel lives in PersistentSoftmax.cuh's anonymous
// namespace, reopened here to instantiate it)
#define SOFTMAX(T, L, LOG)                                                                 \
  namespace { template __global__ void softmax_warp_forward<T, T, float, L, LOG, false, 32>( \
      T*, const T*, int, int, int, const bool*, const int, bool); }
#define SOFTMAX_L(T, LOG) SOFTMAX(T, 0, LOG) SOFTMAX(T, 1, LOG) SOFTMAX(T, 2, LOG)            \
  SOFTMAX(T, 3, LOG) SOFTMAX(T, 5, LOG) SOFTMAX(T, 6, LOG) SOFTMAX(T, 7, LOG)                \
  SOFTMAX(T, 8, LOG) SOFTMAX(T, 10, LOG) SOFTMAX(T, 11, LOG)
SOFTMAX_L(float, false)
SOFTMAX(float, 3, true) SOFTMAX(float, 7, true) SOFTMAX(float, 10, true)
SOFTMAX(c10::Half, 3, false) SOFTMAX(c10::Half, 7, false) SOFTMAX(c10::Half, 10, false)
SOFTMAX(c10::BFloat16, 3, false) SOFTMAX(c10::BFloat16, 7, false)
SOFTMAX(c10::BFloat16, 10, false) SOFTMAX(c10::Half, 6, true)
// half_to_float: dispatch_softmax_forward<Half, float, float, is_log_softmax, false>
namespace {
template __global__ void softmax_warp_forward<c10::Half, float, float, 5, false, false, 32>(
    float*, const c10::Half*, int, int, int, const bool*, const int, bool);
template __global__ void softmax_warp_forward<c10::Half, float, float, 10, true, false, 32>(
    float*, const c10::Half*, int, int, int, const bool*, const int, bool);
}

// ---- reconstructed (layer_norm_kernel.cu and SoftMax.cu are not in the wheel) -------------
// RowwiseMomentsCUDAKernel's structure as torch_mma_emu.aten_cuda.norms.moments states it
// (one block of cuda_utils::kCUDABlockReduceNumThreads threads per row, thread j folding
// elements j, j + blockDim.x, ... with WelfordOps::reduce, then cuda_utils::BlockReduce with
// WelfordOps, then WelfordOps::project with correction 0), around the header's own
// WelfordOps (SharedReduceOps.h) and BlockReduce (block_reduce.cuh): what the compiled code
// settles is their arithmetic (divisions, nvcc's contractions, shuffle order, identities).
#include <ATen/native/cuda/block_reduce.cuh>
#include <thrust/pair.h>

template <typename T>
__global__ void welford_rows(int64_t N, const T* X, float* mean, float* var) {
  using WelfordType = WelfordData<float, int64_t>;
  using WelfordOp = WelfordOps<float, float, int64_t, thrust::pair<float, float>>;
  __shared__ WelfordType shared[C10_WARP_SIZE];
  const int64_t i = blockIdx.x;
  WelfordOp op(/*correction=*/0, /*take_sqrt=*/false);
  WelfordType val(0, 0, 0, 0);
  for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
    val = op.reduce(val, static_cast<float>(X[i * N + j]), i * N + j);
  }
  val = cuda_utils::BlockReduce(val, op, WelfordType(0, 0, 0, 0), shared);
  if (threadIdx.x == 0) {
    thrust::pair<float, float> r = op.project(val);
    var[i] = r.first;
    mean[i] = r.second;
  }
}
template __global__ void welford_rows<float>(int64_t, const float*, float*, float*);
template __global__ void welford_rows<c10::Half>(int64_t, const c10::Half*, float*, float*);

// cuda_utils::BlockReduce of one float a thread with an addition (the block reduce that
// host_softmax's cunn_SoftMaxForward kernels end with, as aten_cuda.host_softmax states)
struct AddOp {
  __device__ float combine(float a, float b) const { return a + b; }
  __device__ float warp_shfl_down(float v, int offset) const { return WARP_SHFL_DOWN(v, offset); }
};
extern "C" __global__ void block_reduce_sum(const float* x, float* out) {
  __shared__ float shared[C10_WARP_SIZE];
  float v = x[blockIdx.x * blockDim.x + threadIdx.x];
  v = cuda_utils::BlockReduce(v, AddOp(), 0.0f, shared);
  if (threadIdx.x == 0) out[blockIdx.x] = v;
}
