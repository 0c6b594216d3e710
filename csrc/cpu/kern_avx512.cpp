// The FDPA kernels of kern/ compiled for x86 AVX-512 (F, BW, VL, DQ).
#include "fdpa_engine.h"
#include "values_engine.h"

#include <array>
#include <utility>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(MMA_EMU_NO_SIMD)
#include <cpuid.h>

#include <cstring>

#include "simd/avx512.h"

namespace mma {
namespace k_avx512 {
using V = simd::Avx512;
#define MMA_K MMA_KT512
// T-FDPA's terms unrolled 16 k at a time, two int32 groups a chunk (L = 16 / 32 rows 1-9%
// faster in kern_bench than GCC's loop; the same on AVX2 is 3-12% slower: 16 ymm registers)
#define MMA_T_UNROLL_TERMS _Pragma("GCC unroll 16")
#define MMA_T_UNROLL_GROUPS _Pragma("GCC unroll 2")
#include "kern/common.inc"
#include "kern/t_fdpa.inc"
#include "kern/tr_fdpa.inc"
#include "kern/e_fdpa.inc"
#include "kern/gst_fdpa.inc"
#include "kern/values.inc"
#include "kern/tables.inc"
#undef MMA_K
}  // namespace k_avx512
ValueKernels value_kernels_avx512_wide() { return k_avx512::value_table(); }
// The FMA / FTZ-AddMul kernels with 512-bit registers measured slower than the AVX2 ones on
// a Zen 4 machine (fp64 FMA 1.4e10 vs 1.7e10, FTZ 4.1e9 vs 5.5e9 MAC/s) and faster on a
// Sapphire Rapids-class Xeon (scripts/kern_bench, docs/cpu_fast.md "Per core": FTZ 2.4x,
// fp32 FMA 1.5x, fp64 1.2x): AMD CPUs (vendor from CPUID) run the AVX2 ones, others these.
// Same bits either way (one IEEE sequence per lane).
static bool cpu_is_amd() {
  static const bool amd = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
    char v[13];
    std::memcpy(v, &b, 4);
    std::memcpy(v + 4, &d, 4);
    std::memcpy(v + 8, &c, 4);
    v[12] = 0;
    return std::strcmp(v, "AuthenticAMD") == 0 || std::strcmp(v, "HygonGenuine") == 0;
  }();
  return amd;
}
ValueKernels value_kernels_avx512() { return cpu_is_amd() ? value_kernels_avx2() : value_kernels_avx512_wide(); }
FdpaKernels fdpa_kernels_avx512() { return k_avx512::fdpa_table(); }
}  // namespace mma
#else
namespace mma {
FdpaKernels fdpa_kernels_avx512() { return FdpaKernels{}; }
ValueKernels value_kernels_avx512() { return ValueKernels{}; }
ValueKernels value_kernels_avx512_wide() { return ValueKernels{}; }
}  // namespace mma
#endif
