// Native matrix-unit instructions on given tiles: the instruction-level interface that the
// hardware validation, probes and model fitting use (torch_mma_emu.native.mma_instruction).
//
//   mma_emu::_mma_instr(Tensor a, Tensor b, Tensor c, int[] cfg) -> Tensor
//
// a: (M, K) codes, row-major; b: (N, K) codes (B transposed: K contiguous); c: (M, N)
// float32 or float16, row-major; all contiguous, on one CUDA device.  cfg = [kind, a type,
// b type, accumulator].  Every output tile runs the instruction K / k times along K in
// ascending order, the accumulator staying in registers between instructions (D fed back
// as C); K == k gives one instruction per output.  Fragment layouts: PTX ISA, "Matrix
// fragments for mma.m16n8k*" and "Register fragments for wgmma" (A from registers, B from
// shared memory, no swizzle, N = 8).
#include <cstdint>

#include "stable_cuda.h"
#include "../core/layout.h"

namespace mma_native {
namespace {

// Kind and Type: csrc/core/layout.h's MMA_INSTR_KINDS / MMA_INSTR_TYPES (a code is the
// position), which torch_mma_emu/cpp.py checks against isa.KERNELS / KERNEL_TYPES at import.
enum Kind : int { MMA_INSTR_KINDS(MMA_ENUM_MEMBER) };
enum Type : int { MMA_INSTR_TYPES(MMA_ENUM_MEMBER) };
enum Acc : int { kAccF32 = 0, kAccF16 = 1 };

// Fragment families (per warp, 16 rows of A, 8 columns of B).
enum Frag : int { kK16Half = 0, kK8Half = 1, kK8Tf32 = 2, kK32Byte = 3 };

constexpr int frag_of(int kind) {
  return kind == kMma16816 || kind == kWgmma16 ? kK16Half
         : kind == kMma1688 ? kK8Half
         : kind == kMma1688Tf32 || kind == kWgmma8Tf32 ? kK8Tf32 : kK32Byte;
}
constexpr int instr_k(int frag) { return frag == kK16Half ? 16 : frag == kK32Byte ? 32 : 8; }
constexpr int esize(int frag) { return frag == kK8Tf32 ? 4 : frag == kK32Byte ? 1 : 2; }
constexpr int a_regs(int frag) { return frag == kK8Half ? 2 : 4; }
constexpr int b_regs(int frag) { return frag == kK8Half ? 1 : 2; }
constexpr bool is_wgmma(int kind) { return kind >= kWgmma16; }

// (row, col) of A element i held by lane; (k, n) of B element i.
template <int F>
__device__ __forceinline__ void a_pos(int lane, int i, int& r, int& c) {
  const int g = lane >> 2, t = lane & 3;
  if (F == kK16Half) { r = g + 8 * ((i >> 1) & 1); c = t * 2 + (i & 1) + 8 * (i >= 4); }
  else if (F == kK8Half) { r = g + 8 * (i >= 2); c = t * 2 + (i & 1); }
  else if (F == kK8Tf32) { r = g + 8 * (i & 1); c = t + 4 * (i >= 2); }
  else { r = g + 8 * ((i >> 2) & 1); c = t * 4 + (i & 3) + 16 * (i >= 8); }
}
template <int F>
__device__ __forceinline__ int b_k(int lane, int i) {
  const int t = lane & 3;
  if (F == kK16Half) return t * 2 + (i & 1) + 8 * (i >= 2);
  if (F == kK8Half) return t * 2 + (i & 1);
  if (F == kK8Tf32) return t + 4 * i;
  return t * 4 + (i & 3) + 16 * (i >= 4);
}

__device__ __forceinline__ uint32_t load_code(const uint8_t* p, int es) {
  if (es == 1) return *p;
  if (es == 2) return *reinterpret_cast<const uint16_t*>(p);
  return *reinterpret_cast<const uint32_t*>(p);
}

// A fragment of rows row0.. row0+15, columns k0.. of a (M, K) row-major.
template <int F>
__device__ __forceinline__ void load_a(const uint8_t* A, int K, int row0, int k0, int lane,
                                       uint32_t (&ra)[4]) {
  constexpr int es = esize(F), epr = 4 / es;
#pragma unroll
  for (int j = 0; j < a_regs(F); ++j) {
    uint32_t v = 0;
#pragma unroll
    for (int e = 0; e < epr; ++e) {
      int r, c;
      a_pos<F>(lane, j * epr + e, r, c);
      v |= load_code(A + ((int64_t(row0) + r) * K + k0 + c) * es, es) << (8 * es * e);
    }
    ra[j] = v;
  }
}

// B fragment of columns n0.. n0+7, rows k0.. of B given as (N, K).
template <int F>
__device__ __forceinline__ void load_b(const uint8_t* Bt, int K, int n0, int k0, int lane,
                                       uint32_t (&rb)[2]) {
  constexpr int es = esize(F), epr = 4 / es;
  const int n = n0 + (lane >> 2);
#pragma unroll
  for (int j = 0; j < b_regs(F); ++j) {
    uint32_t v = 0;
#pragma unroll
    for (int e = 0; e < epr; ++e)
      v |= load_code(Bt + (int64_t(n) * K + k0 + b_k<F>(lane, j * epr + e)) * es, es) << (8 * es * e);
    rb[j] = v;
  }
}

// Accumulator fragment (16 x 8 per warp): element i at row g + 8 (i >= 2), col 2t + (i & 1).
// f32: four floats; f16: two .b32 registers holding (c0, c1) and (c2, c3).
template <int ACC>
__device__ __forceinline__ void load_c(const uint8_t* C, int N, int row0, int n0, int lane,
                                       uint32_t (&rc)[4]) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t at = (int64_t(row0) + g + 8 * (i >= 2)) * N + n0 + t * 2 + (i & 1);
    if (ACC == kAccF32) rc[i] = reinterpret_cast<const uint32_t*>(C)[at];
    else if (i & 1) rc[i >> 1] |= uint32_t(reinterpret_cast<const uint16_t*>(C)[at]) << 16;
    else rc[i >> 1] = reinterpret_cast<const uint16_t*>(C)[at];
  }
}
template <int ACC>
__device__ __forceinline__ void store_d(uint8_t* D, int N, int row0, int n0, int lane,
                                        const uint32_t (&rd)[4]) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t at = (int64_t(row0) + g + 8 * (i >= 2)) * N + n0 + t * 2 + (i & 1);
    if (ACC == kAccF32) reinterpret_cast<uint32_t*>(D)[at] = rd[i];
    else reinterpret_cast<uint16_t*>(D)[at] = uint16_t(rd[i >> 1] >> (16 * (i & 1)));
  }
}

// ------------------------------------------------------------------------------------
// mma.sync
// ------------------------------------------------------------------------------------

#define MMA_F32_4(SHAPE, TYPES)                                                              \
  asm volatile("mma.sync.aligned." SHAPE ".row.col.f32." TYPES ".f32 {%0,%1,%2,%3}, "        \
               "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                                   \
               : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])                             \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))
#define MMA_F16_4(SHAPE, TYPES)                                                              \
  asm volatile("mma.sync.aligned." SHAPE ".row.col.f16." TYPES ".f16 {%0,%1}, "              \
               "{%2,%3,%4,%5}, {%6,%7}, {%0,%1};\n"                                         \
               : "+r"(d[0]), "+r"(d[1])                                                     \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))

// Returns false where this build has no code for the instruction on this device.
template <int KIND, int AT, int BT, int ACC>
__device__ __forceinline__ bool mma_sync_op(uint32_t (&d)[4], const uint32_t (&a)[4],
                                            const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (KIND == kMma16816) {
    if constexpr (AT == kF16 && ACC == kAccF32) { MMA_F32_4("m16n8k16", "f16.f16"); return true; }
    if constexpr (AT == kF16 && ACC == kAccF16) { MMA_F16_4("m16n8k16", "f16.f16"); return true; }
    if constexpr (AT == kBF16 && ACC == kAccF32) { MMA_F32_4("m16n8k16", "bf16.bf16"); return true; }
  }
  if constexpr (KIND == kMma1688) {
    if constexpr (AT == kF16 && ACC == kAccF32) {
      asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                   : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(b[0]));
      return true;
    }
    if constexpr (AT == kF16 && ACC == kAccF16) {
      asm volatile("mma.sync.aligned.m16n8k8.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3}, {%4}, {%0,%1};\n"
                   : "+r"(d[0]), "+r"(d[1]) : "r"(a[0]), "r"(a[1]), "r"(b[0]));
      return true;
    }
    if constexpr (AT == kBF16 && ACC == kAccF32) {
      asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                   : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(b[0]));
      return true;
    }
  }
  if constexpr (KIND == kMma1688Tf32) { MMA_F32_4("m16n8k8", "tf32.tf32"); return true; }
#if __CUDA_ARCH__ >= 890
  if constexpr (KIND == kMma16832) {
    if constexpr (ACC == kAccF32) {
      if constexpr (AT == kE4M3 && BT == kE4M3) { MMA_F32_4("m16n8k32", "e4m3.e4m3"); return true; }
      if constexpr (AT == kE4M3 && BT == kE5M2) { MMA_F32_4("m16n8k32", "e4m3.e5m2"); return true; }
      if constexpr (AT == kE5M2 && BT == kE4M3) { MMA_F32_4("m16n8k32", "e5m2.e4m3"); return true; }
      if constexpr (AT == kE5M2 && BT == kE5M2) { MMA_F32_4("m16n8k32", "e5m2.e5m2"); return true; }
    } else {
      if constexpr (AT == kE4M3 && BT == kE4M3) { MMA_F16_4("m16n8k32", "e4m3.e4m3"); return true; }
      if constexpr (AT == kE4M3 && BT == kE5M2) { MMA_F16_4("m16n8k32", "e4m3.e5m2"); return true; }
      if constexpr (AT == kE5M2 && BT == kE4M3) { MMA_F16_4("m16n8k32", "e5m2.e4m3"); return true; }
      if constexpr (AT == kE5M2 && BT == kE5M2) { MMA_F16_4("m16n8k32", "e5m2.e5m2"); return true; }
    }
  }
#endif
#endif
  (void)d; (void)a; (void)b;
  return false;
}

// One warp per 16 x 8 output tile.
template <int KIND, int AT, int BT, int ACC>
__global__ void mma_sync_kernel(const uint8_t* A, const uint8_t* Bt, const uint8_t* C, uint8_t* D,
                                int M, int N, int K, int* err) {
  constexpr int F = frag_of(KIND), KI = instr_k(F);
  const int lane = threadIdx.x & 31;
  const int64_t tile = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int64_t tn = N / 8;
  if (tile >= int64_t(M / 16) * tn) return;
  const int row0 = int(tile / tn) * 16, n0 = int(tile % tn) * 8;
  uint32_t d[4] = {0, 0, 0, 0};
  load_c<ACC>(C, N, row0, n0, lane, d);
  for (int k0 = 0; k0 < K; k0 += KI) {
    uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    load_a<F>(A, K, row0, k0, lane, a);
    load_b<F>(Bt, K, n0, k0, lane, b);
    if (!mma_sync_op<KIND, AT, BT, ACC>(d, a, b)) {
      if (lane == 0) atomicExch(err, 1);
      return;
    }
  }
  store_d<ACC>(D, N, row0, n0, lane, d);
}

// ------------------------------------------------------------------------------------
// wgmma (sm_90a): one warpgroup per 64 x 8 output tile; A from registers, B from shared
// memory in the no-swizzle K-major layout: 8 rows (n) of 32 bytes of K, split in two 8 x 16 B
// core matrices 128 bytes apart.  With N = 8 there is one core matrix along N, so the
// leading and stride byte offsets are both 128 (either reading of the two fields agrees).
// ------------------------------------------------------------------------------------

__device__ __forceinline__ uint64_t smem_desc(const void* p) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  uint64_t desc = uint64_t((addr & 0x3FFFF) >> 4);
  desc |= uint64_t(128 >> 4) << 16;  // leading dimension byte offset
  desc |= uint64_t(128 >> 4) << 32;  // stride dimension byte offset
  return desc;                        // base offset 0, swizzle mode 0 (none)
}

#define WG_F32(SHAPE, TYPES, TAIL)                                                            \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"                                   \
               "wgmma.mma_async.sync.aligned." SHAPE ".f32." TYPES " {%0,%1,%2,%3}, "          \
               "{%4,%5,%6,%7}, %8, p, 1, 1" TAIL ";\n}\n"                                    \
               : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])                             \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1))
#define WG_F16(SHAPE, TYPES, TAIL)                                                            \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %7, 0;\n"                                   \
               "wgmma.mma_async.sync.aligned." SHAPE ".f16." TYPES " {%0,%1}, "                \
               "{%2,%3,%4,%5}, %6, p, 1, 1" TAIL ";\n}\n"                                    \
               : "+r"(d[0]), "+r"(d[1])                                                     \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1))

template <int KIND, int AT, int BT, int ACC>
__device__ __forceinline__ bool wgmma_op(uint32_t (&d)[4], const uint32_t (&a)[4], uint64_t desc) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (KIND == kWgmma16) {
    if constexpr (AT == kF16 && ACC == kAccF32) { WG_F32("m64n8k16", "f16.f16", ", 0"); return true; }
    if constexpr (AT == kF16 && ACC == kAccF16) { WG_F16("m64n8k16", "f16.f16", ", 0"); return true; }
    if constexpr (AT == kBF16 && ACC == kAccF32) { WG_F32("m64n8k16", "bf16.bf16", ", 0"); return true; }
  }
  if constexpr (KIND == kWgmma8Tf32) { WG_F32("m64n8k8", "tf32.tf32", ""); return true; }
  if constexpr (KIND == kWgmma32) {
    if constexpr (ACC == kAccF32) {
      if constexpr (AT == kE4M3 && BT == kE4M3) { WG_F32("m64n8k32", "e4m3.e4m3", ""); return true; }
      if constexpr (AT == kE4M3 && BT == kE5M2) { WG_F32("m64n8k32", "e4m3.e5m2", ""); return true; }
      if constexpr (AT == kE5M2 && BT == kE4M3) { WG_F32("m64n8k32", "e5m2.e4m3", ""); return true; }
      if constexpr (AT == kE5M2 && BT == kE5M2) { WG_F32("m64n8k32", "e5m2.e5m2", ""); return true; }
    } else {
      if constexpr (AT == kE4M3 && BT == kE4M3) { WG_F16("m64n8k32", "e4m3.e4m3", ""); return true; }
      if constexpr (AT == kE4M3 && BT == kE5M2) { WG_F16("m64n8k32", "e4m3.e5m2", ""); return true; }
      if constexpr (AT == kE5M2 && BT == kE4M3) { WG_F16("m64n8k32", "e5m2.e4m3", ""); return true; }
      if constexpr (AT == kE5M2 && BT == kE5M2) { WG_F16("m64n8k32", "e5m2.e5m2", ""); return true; }
    }
  }
#endif
  (void)d; (void)a; (void)desc;
  return false;
}

template <int KIND, int AT, int BT, int ACC>
__global__ void __launch_bounds__(128) wgmma_kernel(const uint8_t* A, const uint8_t* Bt,
                                                    const uint8_t* C, uint8_t* D, int M, int N,
                                                    int K, int* err) {
  constexpr int F = frag_of(KIND), KI = instr_k(F), es = esize(F);
  static_assert(KI * es == 32, "every wgmma K extent is 32 bytes");
  __shared__ __align__(128) uint8_t sB[256];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int tn = N / 8;
  const int row0 = int(blockIdx.x / tn) * 64 + warp * 16, n0 = int(blockIdx.x % tn) * 8;
  uint32_t d[4] = {0, 0, 0, 0};
  load_c<ACC>(C, N, row0, n0, lane, d);
  for (int k0 = 0; k0 < K; k0 += KI) {
    __syncthreads();  // the previous instruction has read sB
    for (int idx = threadIdx.x; idx < 256; idx += 128) {
      const int n = idx >> 5, byte = idx & 31;
      sB[(byte >> 4) * 128 + n * 16 + (byte & 15)] = Bt[(int64_t(n0) + n) * K * es + int64_t(k0) * es + byte];
    }
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
    __syncthreads();
    uint32_t a[4] = {0, 0, 0, 0};
    load_a<F>(A, K, row0, k0, lane, a);
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
    const bool ok = wgmma_op<KIND, AT, BT, ACC>(d, a, smem_desc(sB));
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
    if (!ok) {
      if (threadIdx.x == 0) atomicExch(err, 1);
      return;  // uniform over the block
    }
  }
  store_d<ACC>(D, N, row0, n0, lane, d);
}

// ------------------------------------------------------------------------------------
// host
// ------------------------------------------------------------------------------------

using Launch = void (*)(const uint8_t*, const uint8_t*, const uint8_t*, uint8_t*, int, int, int,
                        int*, cudaStream_t);

template <int KIND, int AT, int BT, int ACC>
void launch(const uint8_t* A, const uint8_t* Bt, const uint8_t* C, uint8_t* D, int M, int N, int K,
            int* err, cudaStream_t stream) {
  if constexpr (is_wgmma(KIND)) {
    const int blocks = (M / 64) * (N / 8);
    wgmma_kernel<KIND, AT, BT, ACC><<<blocks, 128, 0, stream>>>(A, Bt, C, D, M, N, K, err);
  } else {
    const int64_t tiles = int64_t(M / 16) * (N / 8);
    mma_sync_kernel<KIND, AT, BT, ACC><<<int((tiles + 3) / 4), 128, 0, stream>>>(A, Bt, C, D, M, N, K, err);
  }
}

template <int KIND, int ACC>
Launch pick_fp8(int at, int bt) {
  if (at == kE4M3 && bt == kE4M3) return &launch<KIND, kE4M3, kE4M3, ACC>;
  if (at == kE4M3 && bt == kE5M2) return &launch<KIND, kE4M3, kE5M2, ACC>;
  if (at == kE5M2 && bt == kE4M3) return &launch<KIND, kE5M2, kE4M3, ACC>;
  if (at == kE5M2 && bt == kE5M2) return &launch<KIND, kE5M2, kE5M2, ACC>;
  return nullptr;
}

template <int KIND>
Launch pick_half(int at, int bt, int acc) {
  if (at != bt) return nullptr;
  if (at == kF16) return acc == kAccF32 ? &launch<KIND, kF16, kF16, kAccF32> : &launch<KIND, kF16, kF16, kAccF16>;
  if (at == kBF16 && acc == kAccF32) return &launch<KIND, kBF16, kBF16, kAccF32>;
  return nullptr;
}

Launch pick(int kind, int at, int bt, int acc) {
  switch (kind) {
    case kMma16816: return pick_half<kMma16816>(at, bt, acc);
    case kMma1688: return pick_half<kMma1688>(at, bt, acc);
    case kWgmma16: return pick_half<kWgmma16>(at, bt, acc);
    case kMma1688Tf32:
      return at == kTF32 && bt == kTF32 && acc == kAccF32 ? &launch<kMma1688Tf32, kTF32, kTF32, kAccF32> : nullptr;
    case kWgmma8Tf32:
      return at == kTF32 && bt == kTF32 && acc == kAccF32 ? &launch<kWgmma8Tf32, kTF32, kTF32, kAccF32> : nullptr;
    case kMma16832: return acc == kAccF32 ? pick_fp8<kMma16832, kAccF32>(at, bt) : pick_fp8<kMma16832, kAccF16>(at, bt);
    case kWgmma32: return acc == kAccF32 ? pick_fp8<kWgmma32, kAccF32>(at, bt) : pick_fp8<kWgmma32, kAccF16>(at, bt);
    default: return nullptr;
  }
}

using mma::Tensor;

Tensor mma_instr_cuda(const Tensor& a, const Tensor& b, const Tensor& c, const mma::IntList& cfg) {
  MMA_CHECK_VALUE(cfg.size() == 4, "_mma_instr: cfg = [kind, a type, b type, accumulator]");
  const int kind = int(cfg[0]), at = int(cfg[1]), bt = int(cfg[2]), acc = int(cfg[3]);
  const Launch fn = (kind >= 0 && kind <= kWgmma32) ? pick(kind, at, bt, acc) : nullptr;
  MMA_CHECK_VALUE(fn != nullptr, "_mma_instr: no instruction for kind ", kind, " types ", at,
                  " x ", bt, " accumulator ", acc);
  MMA_CHECK_VALUE(a.dim() == 2 && b.dim() == 2 && c.dim() == 2,
                  "_mma_instr: a (M, K), b (N, K), c (M, N)");
  MMA_CHECK_VALUE(a.is_cuda() && b.device() == a.device() && c.device() == a.device(),
                  "_mma_instr: tensors must be on one CUDA device");
  MMA_CHECK_VALUE(a.is_contiguous() && b.is_contiguous() && c.is_contiguous(),
                  "_mma_instr: tensors must be contiguous");
  const int F = kind == kMma16816 || kind == kWgmma16 ? kK16Half
                : kind == kMma1688 ? kK8Half
                : (kind == kMma1688Tf32 || kind == kWgmma8Tf32) ? kK8Tf32 : kK32Byte;
  const int64_t es = F == kK8Tf32 ? 4 : F == kK32Byte ? 1 : 2;
  const int64_t ki = F == kK16Half ? 16 : F == kK32Byte ? 32 : 8;
  const int64_t tm = kind >= kWgmma16 ? 64 : 16;
  const int64_t M = a.size(0), K = a.size(1), N = b.size(0);
  MMA_CHECK_VALUE(int64_t(a.element_size()) == es && int64_t(b.element_size()) == es,
                  "_mma_instr: a and b must hold ", es, "-byte codes");
  MMA_CHECK_VALUE(b.size(1) == K && c.size(0) == M && c.size(1) == N, "_mma_instr: shapes ",
                  mma::shape_of(a), " ", mma::shape_of(b), " ", mma::shape_of(c), " do not fit");
  MMA_CHECK_VALUE(c.element_size() == size_t(acc == kAccF32 ? 4 : 2),
                  "_mma_instr: c must be float32 (f32 accumulator) or float16");
  MMA_CHECK_VALUE(M % tm == 0 && N % 8 == 0 && K % ki == 0, "_mma_instr: M, N, K must be "
                  "multiples of ", tm, ", 8, ", ki, "; got ", M, ", ", N, ", ", K);
  MMA_CHECK_VALUE(M <= (int64_t(1) << 30) && N <= (int64_t(1) << 30) && K <= (int64_t(1) << 30),
                  "_mma_instr: sizes too large");
  const mma::CudaGuard guard(a.get_device_index());
  Tensor d = torch::stable::empty_like(c);
  if (d.numel() == 0) return d;
  Tensor err = torch::stable::new_zeros(a, {1}, mma::ScalarType::Int);
  const cudaStream_t stream = mma::current_stream(a);
  fn(static_cast<const uint8_t*>(a.data_ptr()), static_cast<const uint8_t*>(b.data_ptr()),
     static_cast<const uint8_t*>(c.data_ptr()), static_cast<uint8_t*>(d.data_ptr()), int(M),
     int(N), int(K), err.mutable_data_ptr<int32_t>(), stream);
  STD_CUDA_KERNEL_LAUNCH_CHECK();
  const Tensor err_host = torch::stable::to(err, mma::Device(torch::headeronly::DeviceType::CPU));
  STD_TORCH_CHECK(err_host.const_data_ptr<int32_t>()[0] == 0, "_mma_instr: this build of "
                  "torch_mma_emu has no code for this instruction on the running GPU (mma.sync "
                  "needs sm_80+, fp8 mma.sync sm_89+, wgmma a build for sm_90a: "
                  "TORCH_CUDA_ARCH_LIST=9.0a bash scripts/build_ext.sh)");
  return d;
}

}  // namespace
}  // namespace mma_native

// the schema: csrc/ops.cpp (every mma_emu schema in one block)
STABLE_TORCH_LIBRARY_IMPL(mma_emu, CUDA, m) {
  m.impl("_mma_instr", TORCH_BOX(&mma_native::mma_instr_cuda));
}
