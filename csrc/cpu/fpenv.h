// The host FPU must not flush subnormals while the kernels use float arithmetic
// (torch.set_flush_denormal(True) sets FTZ/DAZ on x86).  Scoped per worker thread.
#pragma once
#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h>
namespace mma {
struct FpEnvGuard {
  unsigned saved;
  FpEnvGuard() : saved(_mm_getcsr()) { _mm_setcsr(saved & ~0xE040u); }  // clear FTZ, DAZ; round to nearest
  ~FpEnvGuard() { _mm_setcsr(saved); }
};
}  // namespace mma
#elif defined(__aarch64__)
namespace mma {
struct FpEnvGuard {  // FPCR: clear AHP (26), FZ (24), FZ16 (19) and RMode (22-23: nearest)
  unsigned long saved;
  FpEnvGuard() {
    asm volatile("mrs %0, fpcr" : "=r"(saved));
    const unsigned long v = saved & ~((1ul << 26) | (1ul << 24) | (1ul << 19) | (3ul << 22));
    asm volatile("msr fpcr, %0" : : "r"(v));
  }
  ~FpEnvGuard() { asm volatile("msr fpcr, %0" : : "r"(saved)); }
};
}  // namespace mma
#else
namespace mma {
struct FpEnvGuard {};
}  // namespace mma
#endif
