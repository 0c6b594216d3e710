// Small CUDA kernels that test the PTX interpreter (torch_mma_emu.ptx); compiled to PTX by
// regen.sh (nvcc -arch=sm_80 -ptx), the PTX is committed so tests need no nvcc.
#include <cuda_fp16.h>

extern "C" __global__ void vadd(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

// one partial sum per block (shfl.down tree inside each warp, then warp 0 over the warps'
// partials in shared memory) and an integer total by atomicAdd
extern "C" __global__ void block_sum(const float* x, float* part, int* count, int n) {
  __shared__ float warp_sums[32];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = i < n ? x[i] : 0.0f;
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    int nw = (blockDim.x + 31) >> 5;
    v = lane < nw ? warp_sums[lane] : 0.0f;
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    if (lane == 0) part[blockIdx.x] = v;
  }
  if (i < n && x[i] > 0.0f) atomicAdd(count, 1);
}

struct Affine { float scale; int n; float bias[3]; };

// a grid-stride loop over a 2-D block and a 2-D grid, a struct passed by value, a per-thread
// local array indexed by data, float4 loads
extern "C" __global__ void loop2d(const float4* x, float* y, Affine p) {
  float loc[8];
  int tid = threadIdx.y * blockDim.x + threadIdx.x;
  int cta = blockIdx.y * gridDim.x + blockIdx.x;
  int stride = blockDim.x * blockDim.y * gridDim.x * gridDim.y;
  for (int i = cta * blockDim.x * blockDim.y + tid; i < p.n; i += stride) {
    float4 v = x[i];
    for (int k = 0; k < 8; ++k) loc[k] = v.x * k + v.y;
    int j = ((int)v.z) & 7;
    y[i] = p.scale * (v.x + v.y + v.z + v.w) + p.bias[i % 3] + loc[j];
  }
}

// every shfl mode, vote, and warp-level integer intrinsics
extern "C" __global__ void warp_ops(const unsigned* x, unsigned* out) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  unsigned v = x[t];
  unsigned* o = out + 8 * t;
  o[0] = __shfl_xor_sync(0xffffffffu, v, 5);
  o[1] = __shfl_sync(0xffffffffu, v, (v >> 3) & 31);
  o[2] = __shfl_up_sync(0xffffffffu, v, 3);
  o[3] = __shfl_down_sync(0xffffffffu, v, 2, 8);
  o[4] = __ballot_sync(0xffffffffu, v & 1);
  o[5] = __popc(v) + __clz(v) * 64 + (__brev(v) & 0xff) * 4096;
  o[6] = __umulhi(v, 0x9e3779b9u) ^ __byte_perm(v, t, 0x5140);
  o[7] = (v & 1) ? (v % 7u) : (unsigned)((int)v / -3);
}

// rounding modes of float arithmetic and conversions
extern "C" __global__ void rounding(const float* a, const float* b, float* f, int* i,
                                    unsigned short* h, int n) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n) return;
  float x = a[t], y = b[t];
  float* o = f + 12 * t;
  o[0] = __fadd_rz(x, y); o[1] = __fadd_rd(x, y); o[2] = __fadd_ru(x, y);
  o[3] = __fmul_rz(x, y); o[4] = __fmul_rd(x, y); o[5] = __fmul_ru(x, y);
  o[6] = __fmaf_rz(x, y, 1.0f); o[7] = __fmaf_rd(x, y, -x); o[8] = __fmaf_ru(x, x, y);
  o[9] = __fdiv_rn(x, y); o[10] = __fsqrt_rn(fabsf(x)); o[11] = __saturatef(x * y);
  int* q = i + 4 * t;
  q[0] = __float2int_rn(x); q[1] = __float2int_rz(x); q[2] = __float2int_rd(x);
  q[3] = __float2int_ru(x);
  unsigned short* r = h + 3 * t;
  r[0] = __half_as_ushort(__float2half_rn(x)); r[1] = __half_as_ushort(__float2half_rz(x));
  r[2] = __half_as_ushort(__float2half_rd(x));
}

// data-dependent loop trip counts with a break (divergence inside warps), dynamic shared
// memory, a generic pointer that is shared for odd threads and global for even ones, and a
// ballot after the paths reconverge
extern "C" __global__ void diverge(const int* trips, const float* gin, float* out,
                                   unsigned* mask) {
  extern __shared__ float buf[];
  int t = threadIdx.y * blockDim.x + threadIdx.x;
  int n = blockDim.x * blockDim.y;
  int g = blockIdx.x * n + t;
  float acc = 0.0f;
  for (int k = 0; k < trips[g]; ++k) {
    acc += k * 0.5f;
    if (acc > 40.0f) break;
  }
  buf[t] = acc;
  __syncthreads();
  const float* p = (t & 1) ? &buf[(t + 1) % n] : &gin[g];
  out[g] = *p + acc;
  mask[g] = __ballot_sync(0xffffffffu, acc > 10.0f);
}

// float64 rounding modes, half2 / bf16 arithmetic, 64-bit and funnel-shift integer
// intrinsics, atomics of other kinds
#include <cuda_bf16.h>
extern "C" __global__ void wide(const double* x, const unsigned long long* u, const unsigned* h,
                                double* d, unsigned long long* q, unsigned* r, int* at,
                                float* fat) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  double a = x[2 * t], b = x[2 * t + 1];
  double* o = d + 6 * t;
  o[0] = __dadd_rz(a, b); o[1] = __dmul_ru(a, b); o[2] = __fma_rd(a, b, a);
  o[3] = __ddiv_rn(a, b); o[4] = __dsqrt_rn(fabs(a)); o[5] = (double)__double2float_rz(a);
  unsigned long long v = u[t], w = u[t ^ 1];
  unsigned long long* p = q + 4 * t;
  p[0] = __umul64hi(v, w); p[1] = v / (w | 1); p[2] = __popcll(v) + 100ull * __clzll(w);
  p[3] = (unsigned long long)__double2ll_rn(a * 1e6);
  __half2 hv = *reinterpret_cast<const __half2*>(&h[t]);
  __half2 hw = *reinterpret_cast<const __half2*>(&h[t ^ 1]);
  __half2 hs = __hfma2(hv, hw, hv);
  __nv_bfloat162 bv = *reinterpret_cast<const __nv_bfloat162*>(&h[t]);
  __nv_bfloat162 bw = *reinterpret_cast<const __nv_bfloat162*>(&h[t ^ 1]);
  __nv_bfloat162 bs = __hmul2(bv, bw);
  unsigned* s = r + 4 * t;
  s[0] = *reinterpret_cast<unsigned*>(&hs); s[1] = *reinterpret_cast<unsigned*>(&bs);
  s[2] = __funnelshift_l(h[t], h[t ^ 1], t) ^ __funnelshift_rc(h[t], h[t ^ 1], t + 20);
  s[3] = __sad(h[t] & 0xffff, h[t] >> 16, 7u) + __mul24(h[t], 3);
  atomicMax(at, (int)h[t]); atomicCAS(at + 1, t, t + 1); atomicExch(at + 2, t);
  __shared__ float sh;
  if (threadIdx.x == 0) sh = 0.0f;
  __syncthreads();
  atomicAdd(&sh, (float)a);
  __syncthreads();
  if (threadIdx.x == 0) fat[blockIdx.x] = sh;
}
