// CUDA kernel of mma_emu::_gemm: the same header-only core as the CPU kernel
// (csrc/core), so CPU and GPU results are bit-identical by construction.
//
//  * fused ops: A rows and B columns are decoded once into structure-of-arrays planes
//    (sig, exp, cls; K padded with decoded zeros to a multiple of kKT) with per-row
//    special-value flags, exactly the operands the CPU kernel builds.  Then
//      - unscaled t_fdpa with L in {4, 8, 16, 32} (every NVIDIA fp16/bf16/tf32/fp8 path):
//        a shared-memory tiled kernel; each thread keeps a chunk of its A row and B column
//        in registers and runs fast_tfdpa_chunk (fast_tfdpa.h, equal to the core's
//        fused_op for finite chunks); outputs whose row or column holds a NaN or an
//        infinity run the core's fused_op on the decoded planes instead, chunk by chunk;
//      - every other fused op: one thread per output calling the core's dot_fused, as the
//        CPU kernel does.
//  * fma / ftz_addmul: one thread per output calling dot_fma / dot_ftz on fp32/fp64 values
//    (device IEEE intrinsics, never contracted), NaN written as the spec's NaN.
#include <algorithm>
#include <cstring>

#include "../core/chain.h"
#include "../gemm.h"
#include "fast_tfdpa.h"
#include "stable_cuda.h"

namespace mma {
namespace {

constexpr int kThreads = 256;
constexpr int kFT = 16;                     // fast kernel: 16 x 16 threads
constexpr int kTM = 2, kTN = 2;             // outputs per thread (rows x columns)
constexpr int kBM = kFT * kTM, kBN = kFT * kTN;
constexpr int kKT = 32;                     // K tile: a multiple of every fast L
constexpr int kLd = kKT + 4;                // shared row pitch (int32), keeps 16 B alignment
constexpr int64_t kMaxBlocks = int64_t(1) << 20;

// Decoded operand planes of nb batch elements: element (b, r, k) at (b * rows + r) * Kp + k.
struct Planes {
  int32_t* sig;
  int32_t* exp;
  uint8_t* cls;
  uint32_t* flags;  // per (b, r): OR of the classes (nonzero: NaN or infinity in the row)
  int64_t rows, Kp;
  __device__ __forceinline__ Operand row(int64_t b, int64_t r) const {
    const int64_t o = (b * rows + r) * Kp;
    return Operand{sig + o, exp + o, cls + o};
  }
};

int64_t blocks_for(int64_t work, int64_t per_block) {
  return std::max<int64_t>(1, std::min<int64_t>((work + per_block - 1) / per_block, kMaxBlocks));
}

// ---------------------------------------------------------------------------------------
// decoding
// ---------------------------------------------------------------------------------------

// Operand (b0 + b, r, k) of v (or (b0 + b, k, r) when transposed) -> planes; k >= K: zero.
__global__ void decode_kernel(View3 v, int64_t b0, bool transposed, FormatDesc f, int64_t nb,
                              int64_t K, Planes out) {
  const int64_t total = nb * out.rows * out.Kp;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t k = e % out.Kp, br = e / out.Kp;
    const int64_t r = br % out.rows, b = br / out.rows;
    Dec d{0, kZeroExp, kFinite};
    if (k < K) d = decode(f, transposed ? v.at(b0 + b, k, r) : v.at(b0 + b, r, k));
    out.sig[e] = d.sig;
    out.exp[e] = d.exp;
    out.cls[e] = d.cls;
    if (d.cls) atomicOr(out.flags + br, uint32_t(d.cls));
  }
}

// Block scales (b0 + b, r, kb) (or (b0 + b, kb, r) when transposed) -> Dec[(b, r, kb)].
__global__ void decode_scales_kernel(View3 v, int64_t b0, bool transposed, FormatDesc f,
                                     int64_t nb, int64_t rows, int64_t nblk, Dec* out,
                                     uint32_t* flags) {
  const int64_t total = nb * rows * nblk;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t kb = e % nblk, br = e / nblk;
    const int64_t r = br % rows, b = br / rows;
    const Dec d = decode(f, transposed ? v.at(b0 + b, kb, r) : v.at(b0 + b, r, kb));
    out[e] = d;
    if (d.cls) atomicOr(flags + br, uint32_t(d.cls));
  }
}

__device__ __forceinline__ void store_code(uint8_t* out, int64_t idx, int oes, uint64_t r) {
  if (oes == 2) reinterpret_cast<uint16_t*>(out)[idx] = uint16_t(r);
  else reinterpret_cast<uint32_t*>(out)[idx] = uint32_t(r);
}

// ---------------------------------------------------------------------------------------
// fused ops, any: one output per thread through the core's dot_fused
// ---------------------------------------------------------------------------------------

struct Scales {
  const Dec* sa;  // (b, i, kb) or nullptr
  const Dec* sb;  // (b, j, kb)
  const uint32_t* fsa;
  const uint32_t* fsb;
  int64_t nblk;
};

template <int OP>
__global__ void generic_kernel(Params P, Planes A, Planes B, Scales S, View3 c, int64_t b0,
                               int64_t nb, int64_t M, int64_t N, int K, uint8_t* out, int oes) {
  Params Q = P;
  Q.op = OP;  // the host dispatched on P.op == OP; a constant lets the compiler drop the rest
  const int64_t total = nb * M * N;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = e % N, bi = e / N;
    const int64_t i = bi % M, b = bi / M;
    uint32_t fl = A.flags[b * M + i] | B.flags[b * N + j];
    const Dec* sa = nullptr;
    const Dec* sb = nullptr;
    if (S.sa) {
      fl |= S.fsa[b * M + i] | S.fsb[b * N + j];
      sa = S.sa + (b * M + i) * S.nblk;
      sb = S.sb + (b * N + j) * S.nblk;
    }
    const uint64_t r = dot_fused(Q, A.row(b, i), B.row(b, j), K, c.at(b0 + b, i, j), sa, sb,
                                 fl != 0);
    store_code(out, (b0 + b) * M * N + i * N + j, oes, r);
  }
}

// ---------------------------------------------------------------------------------------
// t_fdpa fast path: shared-memory tiles, register chunks
// ---------------------------------------------------------------------------------------

template <int L>
__device__ __forceinline__ void load_chunk(const int32_t* src, int32_t (&dst)[L]) {
#pragma unroll
  for (int k = 0; k < L; k += 4) {
    const int4 v = *reinterpret_cast<const int4*>(src + k);
    dst[k] = v.x; dst[k + 1] = v.y; dst[k + 2] = v.z; dst[k + 3] = v.w;
  }
}

// The IEEE output formats of the NVIDIA t_fdpa rows (formats.py: fp32, fp16).
constexpr FormatDesc kFp32Desc{2, 8, 23, 127, kIeee, 1, 0};
constexpr FormatDesc kFp16Desc{5, 5, 10, 15, kIeee, 1, 0};

inline bool same_desc(const FormatDesc& x, const FormatDesc& y) {
  return x.code == y.code && x.ebits == y.ebits && x.mbits == y.mbits && x.bias == y.bias &&
         x.nan_style == y.nan_style && x.is_signed == y.is_signed && x.container == y.container;
}

// RHO >= 0: the host checked P.rho == RHO and P.fo == the matching IEEE format, so fixing
// them as constants changes no value; it lets the compiler fold the decoding of the
// accumulator and the final conversion (the per-chunk cost).  RHO < 0: read from P.
template <int L, bool WIDE, int RHO>
__global__ void __launch_bounds__(kThreads)
fast_tfdpa_kernel(Params P0, int32_t G, Planes A, Planes B, View3 c, int64_t b0, int64_t nb,
                  int64_t M, int64_t N, int K, uint8_t* out, int oes) {
  static_assert(kKT % L == 0 && L % 4 == 0, "chunk length must tile kKT");
  __shared__ __align__(16) int32_t sAs[kBM][kLd];
  __shared__ __align__(16) int32_t sAe[kBM][kLd];
  __shared__ __align__(16) int32_t sBs[kBN][kLd];
  __shared__ __align__(16) int32_t sBe[kBN][kLd];
  Params P = P0;
  P.op = kTFdpa;  // as in generic_kernel: the special-value path needs only t_fdpa
  if constexpr (RHO >= 0) {
    P.rho = RHO;
    P.fo = RHO == kRneFp16 ? kFp16Desc : kFp32Desc;
  }
  const OutFmt o = out_fmt(P.rho);
  const int tx = threadIdx.x % kFT, ty = threadIdx.x / kFT;
  const int64_t tm = (M + kBM - 1) / kBM, tn = (N + kBN - 1) / kBN;
  const int64_t tiles = nb * tm * tn;
  const int32_t gmul = int32_t(1) << G;
  // tile loader: thread -> (row, 4 consecutive k)
  const int lrow = threadIdx.x / (kKT / 4), lk = (threadIdx.x % (kKT / 4)) * 4;
  static_assert(kThreads / (kKT / 4) == kBM && kBM == kBN, "one int4 per thread and plane");

  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t b = t / (tm * tn), rem = t % (tm * tn);
    const int64_t i0 = (rem / tn) * kBM, j0 = (rem % tn) * kBN;
    uint32_t acc[kTM][kTN];
    bool valid[kTM][kTN], special[kTM][kTN];
#pragma unroll
    for (int r = 0; r < kTM; ++r)
#pragma unroll
      for (int q = 0; q < kTN; ++q) {
        const int64_t i = i0 + ty + kFT * r, j = j0 + tx + kFT * q;
        valid[r][q] = i < M && j < N;
        special[r][q] = valid[r][q] && (A.flags[b * M + i] | B.flags[b * N + j]) != 0;
        acc[r][q] = (valid[r][q] && !P.epilogue) ? uint32_t(c.at(b0 + b, i, j)) : 0u;
      }
    const int64_t ia = std::min<int64_t>(i0 + lrow, M - 1), jb = std::min<int64_t>(j0 + lrow, N - 1);
    const int64_t offa = (b * M + ia) * A.Kp + lk, offb = (b * N + jb) * B.Kp + lk;

    for (int64_t kt = 0; kt < K; kt += kKT) {
      __syncthreads();  // the previous tile is consumed
      {
        int4 v = *reinterpret_cast<const int4*>(A.sig + offa + kt);
        v.x *= gmul; v.y *= gmul; v.z *= gmul; v.w *= gmul;  // a 2^G (exact, see fast_tfdpa.h)
        *reinterpret_cast<int4*>(&sAs[lrow][lk]) = v;
        *reinterpret_cast<int4*>(&sAe[lrow][lk]) = *reinterpret_cast<const int4*>(A.exp + offa + kt);
        *reinterpret_cast<int4*>(&sBs[lrow][lk]) = *reinterpret_cast<const int4*>(B.sig + offb + kt);
        *reinterpret_cast<int4*>(&sBe[lrow][lk]) = *reinterpret_cast<const int4*>(B.exp + offb + kt);
      }
      __syncthreads();
#pragma unroll 1
      for (int kc = 0; kc < kKT; kc += L) {
        const int k0 = int(kt) + kc;
        if (k0 >= K) break;  // the core runs no chunk past K (same for the whole block)
#pragma unroll
        for (int r = 0; r < kTM; ++r) {
          int32_t as[L], ae[L];
          load_chunk<L>(&sAs[ty + kFT * r][kc], as);
          load_chunk<L>(&sAe[ty + kFT * r][kc], ae);
#pragma unroll
          for (int q = 0; q < kTN; ++q) {
            if (!valid[r][q]) continue;
            if (special[r][q]) {  // a NaN or an infinity in the row or column: the core op
              const int64_t i = i0 + ty + kFT * r, j = j0 + tx + kFT * q;
              const Chunk ch{A.row(b, i).shifted(k0), B.row(b, j).shifted(k0), imin(L, K - k0),
                             k0, nullptr, nullptr};
              acc[r][q] = uint32_t(fused_op(P, o, ch, acc[r][q], true));
            } else {
              int32_t bs[L], be[L];
              load_chunk<L>(&sBs[tx + kFT * q][kc], bs);
              load_chunk<L>(&sBe[tx + kFT * q][kc], be);
              acc[r][q] = uint32_t(fast_tfdpa_chunk<L, WIDE>(P, o, as, ae, bs, be, acc[r][q]));
            }
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kTM; ++r)
#pragma unroll
      for (int q = 0; q < kTN; ++q) {
        if (!valid[r][q]) continue;
        const int64_t i = i0 + ty + kFT * r, j = j0 + tx + kFT * q;
        uint64_t v = acc[r][q];
        if (P.epilogue) v = epilogue_add(P, v, c.at(b0 + b, i, j));
        store_code(out, (b0 + b) * M * N + i * N + j, oes, v);
      }
  }
}

// ---------------------------------------------------------------------------------------
// fma / ftz_addmul on IEEE values
// ---------------------------------------------------------------------------------------

template <class T>
__global__ void values_kernel(Params P, const T* a, const T* bt, const T* c, int64_t cs0,
                              int64_t cs1, int64_t cs2, T* out, int64_t nb, int64_t M, int64_t N,
                              int K) {
  const int64_t total = nb * M * N;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = e % N, bi = e / N;
    const int64_t i = bi % M, b = bi / M;
    const T* arow = a + bi * K;  // (b * M + i) * K
    const T* bcol = bt + (b * N + j) * K;
    const T cv = c[b * cs0 + i * cs1 + j * cs2];
    T v;
    if constexpr (sizeof(T) == 4) {
      v = P.op == kFma ? dot_fma<T>(P, arow, bcol, K, cv) : dot_ftz(P, arow, bcol, K, cv);
    } else {
      v = dot_fma<T>(P, arow, bcol, K, cv);
    }
    if (is_nan(v)) {
      if constexpr (sizeof(T) == 4) v = f32_of(uint32_t(P.nan_bits));
      else v = f64_of(P.nan_bits);
    }
    out[e] = v;
  }
}

template <class T>
void gemm_values(const Tensor& a, const Tensor& b, const Tensor& c, const Params& P,
                 Tensor& out, cudaStream_t stream) {
  const int64_t Bt = a.size(0), M = a.size(1), K = a.size(2), N = b.size(2);
  const Tensor Ac = torch::stable::contiguous(a);
  const Tensor Bc = torch::stable::contiguous(torch::stable::transpose(b, 1, 2));
  const int64_t total = Bt * M * N;
  values_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
      P, Ac.const_data_ptr<T>(), Bc.const_data_ptr<T>(), c.const_data_ptr<T>(), c.stride(0),
      c.stride(1), c.stride(2), out.mutable_data_ptr<T>(), Bt, M, N, int(K));
  STD_CUDA_KERNEL_LAUNCH_CHECK();
}

// ---------------------------------------------------------------------------------------
// host orchestration of the fused ops
// ---------------------------------------------------------------------------------------

struct PlaneBuf {
  Tensor sig, exp, cls, flags;
  Planes view(int64_t rows, int64_t Kp) {
    return Planes{sig.mutable_data_ptr<int32_t>(), exp.mutable_data_ptr<int32_t>(),
                  cls.mutable_data_ptr<uint8_t>(),
                  reinterpret_cast<uint32_t*>(flags.mutable_data_ptr<int32_t>()), rows, Kp};
  }
};

// on the device of `like`
PlaneBuf alloc_planes(int64_t nb, int64_t rows, int64_t Kp, const Tensor& like) {
  const int64_t n = std::max<int64_t>(1, nb * rows * Kp);
  return PlaneBuf{torch::stable::new_empty(like, {n}, ScalarType::Int),
                  torch::stable::new_empty(like, {n}, ScalarType::Int),
                  torch::stable::new_empty(like, {n}, ScalarType::Byte),
                  torch::stable::new_zeros(like, {nb * rows}, ScalarType::Int)};
}

void launch_decode(const Tensor& t, int64_t b0, bool transposed, const FormatDesc& f,
                   int64_t nb, int64_t K, const Planes& p, cudaStream_t stream) {
  const int64_t total = nb * p.rows * p.Kp;
  if (total == 0) return;
  decode_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(view3(t), b0, transposed,
                                                                      f, nb, K, p);
  STD_CUDA_KERNEL_LAUNCH_CHECK();
}

template <int OP>
void launch_generic(const Params& P, const Planes& A, const Planes& B, const Scales& S,
                    const View3& c, int64_t b0, int64_t nb, int64_t M, int64_t N, int K,
                    uint8_t* out, int oes, cudaStream_t stream) {
  generic_kernel<OP><<<blocks_for(nb * M * N, kThreads), kThreads, 0, stream>>>(
      P, A, B, S, c, b0, nb, M, N, K, out, oes);
  STD_CUDA_KERNEL_LAUNCH_CHECK();
}

// Instantiations with the output conversion fixed (the registry's hot rows): sm80/sm89 and
// sm90 tf32 (L = 8), sm90 fp16/bf16 (L = 16), sm89 / sm90 fp8 (L = 16 / 32, E8M13 or fp16).
constexpr bool has_fixed(int L, int rho) {
  return (rho == kRzFp32 && (L == 8 || L == 16)) || (rho == kRzE8m13 && (L == 16 || L == 32)) ||
         (rho == kRneFp16 && (L == 8 || L == 16 || L == 32));
}

template <int L, bool WIDE, int RHO>
void launch_fast_kernel(const Params& P, const FastTfdpa& f, const Planes& A, const Planes& B,
                        const View3& c, int64_t b0, int64_t nb, int64_t M, int64_t N, int K,
                        uint8_t* out, int oes, cudaStream_t stream) {
  const int64_t tiles = nb * ((M + kBM - 1) / kBM) * ((N + kBN - 1) / kBN);
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(tiles, kMaxBlocks));
  fast_tfdpa_kernel<L, WIDE, RHO><<<blocks, kThreads, 0, stream>>>(P, f.G, A, B, c, b0, nb, M, N,
                                                                   K, out, oes);
  STD_CUDA_KERNEL_LAUNCH_CHECK();
}

template <int L>
void launch_fast(const Params& P, const FastTfdpa& f, const Planes& A, const Planes& B,
                 const View3& c, int64_t b0, int64_t nb, int64_t M, int64_t N, int K,
                 uint8_t* out, int oes, cudaStream_t stream) {
  const bool std_out = (P.rho == kRneFp16) ? same_desc(P.fo, kFp16Desc)
                       : (P.rho == kRzFp32 || P.rho == kRzE8m13) ? same_desc(P.fo, kFp32Desc)
                                                                  : false;
  const int rho = (!f.wide && std_out) ? P.rho : -1;
  if constexpr (has_fixed(L, kRzFp32))
    if (rho == kRzFp32) return launch_fast_kernel<L, false, kRzFp32>(P, f, A, B, c, b0, nb, M, N, K, out, oes, stream);
  if constexpr (has_fixed(L, kRzE8m13))
    if (rho == kRzE8m13) return launch_fast_kernel<L, false, kRzE8m13>(P, f, A, B, c, b0, nb, M, N, K, out, oes, stream);
  if constexpr (has_fixed(L, kRneFp16))
    if (rho == kRneFp16) return launch_fast_kernel<L, false, kRneFp16>(P, f, A, B, c, b0, nb, M, N, K, out, oes, stream);
  if (f.wide) launch_fast_kernel<L, true, -1>(P, f, A, B, c, b0, nb, M, N, K, out, oes, stream);
  else launch_fast_kernel<L, false, -1>(P, f, A, B, c, b0, nb, M, N, K, out, oes, stream);
}

void gemm_fused(const Tensor& a, const Tensor& b, const Tensor& c, const OptTensor& sa,
                const OptTensor& sb, const Params& P, Tensor& out, cudaStream_t stream) {
  const int64_t Bt = a.size(0), M = a.size(1), K = a.size(2), N = b.size(2);
  const bool scaled = sa.has_value();
  const int64_t nblk = scaled ? sa->size(2) : 0;
  const FastTfdpa fast = scaled ? FastTfdpa{false, false, 0} : fast_tfdpa_plan(P);
  const int64_t Kp = (K + kKT - 1) / kKT * kKT;
  // decode the batch in groups so that the planes stay below ~1 GiB
  const int64_t per_batch = (M + N) * std::max<int64_t>(Kp, 1) * 9 + (M + N) * nblk * 12 + 1;
  const int64_t group = std::max<int64_t>(1, std::min<int64_t>(Bt, (int64_t(1) << 30) / per_batch));
  const View3 vc = view3(c);
  uint8_t* obase = static_cast<uint8_t*>(out.data_ptr());
  const int oes = int(out.element_size());
  PlaneBuf pa = alloc_planes(group, M, Kp, a), pb = alloc_planes(group, N, Kp, a);
  Tensor dsa, dsb, fsa, fsb;
  if (scaled) {
    const auto u8 = ScalarType::Byte, i32 = ScalarType::Int;
    const int64_t dec = int64_t(sizeof(Dec));
    dsa = torch::stable::new_empty(a, {std::max<int64_t>(1, group * M * nblk * dec)}, u8);
    dsb = torch::stable::new_empty(a, {std::max<int64_t>(1, group * N * nblk * dec)}, u8);
    fsa = torch::stable::new_empty(a, {group * M}, i32);
    fsb = torch::stable::new_empty(a, {group * N}, i32);
  }
  for (int64_t b0 = 0; b0 < Bt; b0 += group) {
    const int64_t nb = std::min(group, Bt - b0);
    if (b0 > 0) {
      torch::stable::zero_(pa.flags);
      torch::stable::zero_(pb.flags);
    }
    const Planes A = pa.view(M, Kp), B = pb.view(N, Kp);
    launch_decode(a, b0, false, P.fa, nb, K, A, stream);
    launch_decode(b, b0, true, P.fb, nb, K, B, stream);
    Scales S{nullptr, nullptr, nullptr, nullptr, nblk};
    if (scaled) {
      torch::stable::zero_(fsa);
      torch::stable::zero_(fsb);
      Dec* da = reinterpret_cast<Dec*>(dsa.mutable_data_ptr<uint8_t>());
      Dec* db = reinterpret_cast<Dec*>(dsb.mutable_data_ptr<uint8_t>());
      uint32_t* fa = reinterpret_cast<uint32_t*>(fsa.mutable_data_ptr<int32_t>());
      uint32_t* fb = reinterpret_cast<uint32_t*>(fsb.mutable_data_ptr<int32_t>());
      if (nb * M * nblk > 0) {
        decode_scales_kernel<<<blocks_for(nb * M * nblk, kThreads), kThreads, 0, stream>>>(
            view3(*sa), b0, false, P.fs, nb, M, nblk, da, fa);
        STD_CUDA_KERNEL_LAUNCH_CHECK();
      }
      if (nb * N * nblk > 0) {
        decode_scales_kernel<<<blocks_for(nb * N * nblk, kThreads), kThreads, 0, stream>>>(
            view3(*sb), b0, true, P.fs, nb, N, nblk, db, fb);
        STD_CUDA_KERNEL_LAUNCH_CHECK();
      }
      S = Scales{da, db, fa, fb, nblk};
    }
    if (fast.ok) {
      switch (P.L) {
        case 4: launch_fast<4>(P, fast, A, B, vc, b0, nb, M, N, int(K), obase, oes, stream); break;
        case 8: launch_fast<8>(P, fast, A, B, vc, b0, nb, M, N, int(K), obase, oes, stream); break;
        case 16: launch_fast<16>(P, fast, A, B, vc, b0, nb, M, N, int(K), obase, oes, stream); break;
        default: launch_fast<32>(P, fast, A, B, vc, b0, nb, M, N, int(K), obase, oes, stream); break;
      }
      continue;
    }
    switch (P.op) {
      case kTFdpa: launch_generic<kTFdpa>(P, A, B, S, vc, b0, nb, M, N, int(K), obase, oes, stream); break;
      case kStFdpa: launch_generic<kStFdpa>(P, A, B, S, vc, b0, nb, M, N, int(K), obase, oes, stream); break;
      case kGstFdpa: launch_generic<kGstFdpa>(P, A, B, S, vc, b0, nb, M, N, int(K), obase, oes, stream); break;
      case kTrFdpa: launch_generic<kTrFdpa>(P, A, B, S, vc, b0, nb, M, N, int(K), obase, oes, stream); break;
      case kGtrFdpa: launch_generic<kGtrFdpa>(P, A, B, S, vc, b0, nb, M, N, int(K), obase, oes, stream); break;
      case kEFdpa: launch_generic<kEFdpa>(P, A, B, S, vc, b0, nb, M, N, int(K), obase, oes, stream); break;
      default: STD_TORCH_CHECK(false, "_gemm (CUDA): unknown fused op ", P.op);
    }
  }
}

}  // namespace

Tensor gemm_cuda(const Tensor& a, const Tensor& b, const Tensor& c, const OptTensor& sa,
                 const OptTensor& sb, const Params& P) {
  const CudaGuard guard(a.get_device_index());
  Tensor out = torch::stable::new_empty(c, {a.size(0), a.size(1), b.size(2)});  // contiguous
  if (out.numel() == 0) return out;
  MMA_CHECK_VALUE(a.size(2) <= int64_t(INT32_MAX), "_gemm (CUDA): K is too large");
  const cudaStream_t stream = current_stream(a);
  if (P.op == kFma || P.op == kFtzAddMul) {
    if (c.scalar_type() == ScalarType::Double) gemm_values<double>(a, b, c, P, out, stream);
    else gemm_values<float>(a, b, c, P, out, stream);
  } else {
    gemm_fused(a, b, c, sa, sb, P, out, stream);
  }
  return out;
}

namespace {
Tensor gemm_cuda_entry(const Tensor& a, const Tensor& b, const Tensor& c, const OptTensor& sa,
                       const OptTensor& sb, const IntList& params) {
  const Params P = checked_params(a, b, c, sa, sb, params);
  MMA_CHECK_VALUE(a.is_cuda(), "_gemm (CUDA kernel) got a ", device_name(a.device()), " tensor");
  return gemm_cuda(a, b, c, sa, sb, P);
}
}  // namespace

}  // namespace mma

STABLE_TORCH_LIBRARY_IMPL(mma_emu, CUDA, m) { m.impl("_gemm", TORCH_BOX(&mma::gemm_cuda_entry)); }
