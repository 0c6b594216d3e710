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

namespace mma {

// Exponent given to zero terms: far below anything real, so a zero never wins a maximum.
constexpr int32_t kZeroExp = -(1 << 24);
// Bit length of v (0 for v == 0).
MMA_HD int bitlen64(uint64_t v) {
#if defined(__CUDA_ARCH__)
  return v ? 64 - __clzll(static_cast<long long>(v)) : 0;
#else
  return v ? 64 - __builtin_clzll(v) : 0;
#endif
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
MMA_HD float f32_of(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float f; std::memcpy(&f, &b, 4); return f;
#endif
}
MMA_HD uint32_t bits_of(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t b; std::memcpy(&b, &f, 4); return b;
#endif
}
MMA_HD double f64_of(uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(b));
#else
  double f; std::memcpy(&f, &b, 8); return f;
#endif
}
MMA_HD uint64_t bits_of(double f) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(f));
#else
  uint64_t b; std::memcpy(&b, &f, 8); return b;
#endif
}
}  // namespace mma
