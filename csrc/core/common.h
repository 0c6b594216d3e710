// Basic portability layer of the header-only arithmetic core.
// Everything in csrc/core is compiled both by the host compiler (CPU kernel) and by nvcc
// (CUDA kernel), so CPU and GPU results are bit-identical by construction.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define MMA_HD __host__ __device__ __forceinline__
#elif defined(__GNUC__)
// always_inline: the CPU kernel's per-ISA clones (target_clones) then contain the whole core
#define MMA_HD inline __attribute__((always_inline))
#else
#define MMA_HD inline
#endif

// One function body for host and device: `dev` (a CUDA intrinsic) in nvcc's device pass,
// `host` everywhere else; only the chosen expression is compiled.
#if defined(__CUDA_ARCH__)
#define MMA_DEV_OR_HOST(dev, host) (dev)
#else
#define MMA_DEV_OR_HOST(dev, host) (host)
#endif

namespace mma {

// Exponent given to zero terms: far below anything real, so a zero never wins a maximum.
constexpr int32_t kZeroExp = -(1 << 24);
// Spec.zero_exp = None (spec.NO_FLOOR): zero terms take no exponent
constexpr int32_t kNoZeroExp = -(1 << 20);
// Bit length of v (0 for v == 0).
MMA_HD int bitlen64(uint64_t v) {
  return v ? 64 - MMA_DEV_OR_HOST(__clzll(static_cast<long long>(v)), __builtin_clzll(v)) : 0;
}

MMA_HD int32_t imax(int32_t a, int32_t b) { return a > b ? a : b; }
MMA_HD int32_t imin(int32_t a, int32_t b) { return a < b ? a : b; }

// Sign-magnitude truncation toward zero of v * 2^-s (s may be negative: exact left shift).
// Callers guarantee the left-shifted value fits (|v| * 2^-s < 2^62).
MMA_HD int64_t shift_rz(int64_t v, int32_t s) {
  if (s <= 0) return v * (int64_t(1) << (-s));
  uint64_t m = v < 0 ? uint64_t(-v) : uint64_t(v);
  m = s >= 64 ? 0 : (m >> s);
  return v < 0 ? -int64_t(m) : int64_t(m);
}

// Round toward minus infinity of v * 2^-s.
MMA_HD int64_t shift_rd(int64_t v, int32_t s) {
  if (s <= 0) return v * (int64_t(1) << (-s));
  if (s >= 63) return v < 0 ? -1 : 0;
  return v >> s;  // arithmetic shift = floor
}

}  // namespace mma

#include <cstring>

namespace mma {
// Bit casts that work on host and device.
template <class To, class From>
MMA_HD To host_bit_cast(From x) {  // memcpy: no aliasing UB, compiles to a register move
  static_assert(sizeof(To) == sizeof(From), "host_bit_cast: sizes differ");
  To y;
  std::memcpy(&y, &x, sizeof(To));
  return y;
}
MMA_HD float f32_of(uint32_t b) {
  return MMA_DEV_OR_HOST(__uint_as_float(b), host_bit_cast<float>(b));
}
MMA_HD uint32_t bits_of(float f) {
  return MMA_DEV_OR_HOST(__float_as_uint(f), host_bit_cast<uint32_t>(f));
}
MMA_HD double f64_of(uint64_t b) {
  return MMA_DEV_OR_HOST(__longlong_as_double(static_cast<long long>(b)),
                         host_bit_cast<double>(b));
}
MMA_HD uint64_t bits_of(double f) {
  return MMA_DEV_OR_HOST(static_cast<uint64_t>(__double_as_longlong(f)),
                         host_bit_cast<uint64_t>(f));
}
}  // namespace mma
