// The FDPA and IEEE-value kernels of kern/ compiled for x86 AVX2 (+ FMA, F16C).
#include "fdpa_engine.h"
#include "values_engine.h"

#include <array>
#include <utility>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(MMA_EMU_NO_SIMD)
#include "simd/avx2.h"

namespace mma {
namespace k_avx2 {
using V = simd::Avx2;
#define MMA_K MMA_KT
#include "kern/common.inc"
#include "kern/t_fdpa.inc"
#include "kern/tr_fdpa.inc"
#include "kern/e_fdpa.inc"
#include "kern/gst_fdpa.inc"
#include "kern/values.inc"
#include "kern/tables.inc"
#undef MMA_K
}  // namespace k_avx2
ValueKernels value_kernels_avx2() { return k_avx2::value_table(); }
FdpaKernels fdpa_kernels_avx2() { return k_avx2::fdpa_table(); }
}  // namespace mma
#else
namespace mma {
FdpaKernels fdpa_kernels_avx2() { return FdpaKernels{}; }
ValueKernels value_kernels_avx2() { return ValueKernels{}; }
}  // namespace mma
#endif
