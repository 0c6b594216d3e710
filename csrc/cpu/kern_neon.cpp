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
#undef MMA_K
}  // namespace k_neon
ValueKernels value_kernels_neon() {
  ValueKernels k;
  k.wf = 2 * k_neon::V::kN;
  k.wd = 2 * k_neon::V::kND;
  k.f32 = k_neon::fma_rows_f32;
  k.f64 = k_neon::fma_rows_f64;
  k.ftz = k_neon::ftz_rows;
  return k;
}
FdpaKernels fdpa_kernels_neon() {
  return {k_neon::t_panel, k_neon::tr_panel, k_neon::e_panel, k_neon::gst_panel, k_neon::kTFixed.data(), k_neon::panel_fixed};
}
}  // namespace mma
#else
namespace mma {
FdpaKernels fdpa_kernels_neon() { return {nullptr, nullptr, nullptr, nullptr, nullptr, nullptr}; }
ValueKernels value_kernels_neon() { return ValueKernels{}; }
}  // namespace mma
#endif
