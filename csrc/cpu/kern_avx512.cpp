// The FDPA kernels of kern/ compiled for x86 AVX-512 (F, BW, VL, DQ).
#include "fdpa_engine.h"
#include "values_engine.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(MMA_EMU_NO_SIMD)
#include "simd/avx512.h"

namespace mma {
namespace k_avx512 {
using V = simd::Avx512;
#define MMA_K MMA_KT512
#include "kern/common.inc"
#include "kern/t_fdpa.inc"
#include "kern/tr_fdpa.inc"
#include "kern/e_fdpa.inc"
#include "kern/gst_fdpa.inc"
#undef MMA_K
}  // namespace k_avx512
// the FMA / FTZ-AddMul kernels with 512-bit registers measured slower on Zen 4 than the
// AVX2 ones (fp64 FMA 1.4e10 vs 1.7e10, FTZ 4.1e9 vs 5.5e9 MAC/s): AVX-512 CPUs run those
ValueKernels value_kernels_avx512() { return value_kernels_avx2(); }
FdpaKernels fdpa_kernels_avx512() {
  return {k_avx512::t_panel, k_avx512::tr_panel, k_avx512::e_panel, k_avx512::gst_panel};
}
}  // namespace mma
#else
namespace mma {
FdpaKernels fdpa_kernels_avx512() { return {nullptr, nullptr, nullptr, nullptr}; }
ValueKernels value_kernels_avx512() { return ValueKernels{}; }
}  // namespace mma
#endif
