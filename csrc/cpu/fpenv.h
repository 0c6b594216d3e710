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
#else
namespace mma {
struct FpEnvGuard {};
}  // namespace mma
#endif
