// The FDPA and IEEE-value kernels of kern/ compiled for aarch64 NEON (Advanced SIMD, always present there).
#include "fdpa_engine.h"
#include "values_engine.h"

#include <array>
#include <utility>

#if defined(__aarch64__) && !defined(MMA_EMU_NO_SIMD)
#include "simd/neon.h"

namespace mma {
namespace k_neon {
using V = simd::Neon;
#define MMA_K
#include "kern/common.inc"
#include "kern/t_fdpa.inc"
#include "kern/tr_fdpa.inc"
#include "kern/e_fdpa.inc"
#include "kern/gst_fdpa.inc"
#include "kern/values.inc"
#include "kern/tables.inc"
#undef MMA_K
}  // namespace k_neon
ValueKernels value_kernels_neon() { return k_neon::value_table(); }
FdpaKernels fdpa_kernels_neon() { return k_neon::fdpa_table(); }
}  // namespace mma
#else
namespace mma {
FdpaKernels fdpa_kernels_neon() { return FdpaKernels{}; }
ValueKernels value_kernels_neon() { return ValueKernels{}; }
}  // namespace mma
#endif
