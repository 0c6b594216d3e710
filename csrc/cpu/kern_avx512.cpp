// The FDPA kernels of kern/ compiled for x86 AVX-512 (F, BW, VL, DQ).
#include "fdpa_engine.h"

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
FdpaKernels fdpa_kernels_avx512() {
  return {k_avx512::t_panel, k_avx512::tr_panel, k_avx512::e_panel, k_avx512::gst_panel};
}
}  // namespace mma
#else
namespace mma {
FdpaKernels fdpa_kernels_avx512() { return {nullptr, nullptr, nullptr, nullptr}; }
}  // namespace mma
#endif
