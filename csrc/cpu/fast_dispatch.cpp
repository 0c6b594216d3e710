// Run-time choice of the CPU fast paths (ISA, MMA_EMU_SCALAR), their single eligibility
// test, and Ctrl-C handling for long calls.
#include <Python.h>
#include <torch/csrc/Exceptions.h>
#include <torch/library.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "fast_paths.h"

namespace mma {

Isa cpu_isa() {
  const char* s = std::getenv("MMA_EMU_SCALAR");
  if (s && s[0] && std::strcmp(s, "0") != 0) return Isa::kScalar;
  Isa best = Isa::kScalar;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c"))
    best = Isa::kAvx2;
  if (best == Isa::kAvx2 && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq"))
    best = Isa::kAvx512;
#endif
  const char* cap = std::getenv("MMA_EMU_CPU_ISA");
  if (cap && std::strcmp(cap, "scalar") == 0) return Isa::kScalar;
  if (cap && std::strcmp(cap, "avx2") == 0 && best == Isa::kAvx512) return Isa::kAvx2;
  return best;
}

// Formats whose values are exact fp32 numbers built as sig * 2^(exp - mbits) from the plane
// window |exp| <= 31 and whose pairwise products are exact in fp32 (<= 24 significand bits).
static bool plane_format(const FormatDesc& f) {
  return f.ebits >= 1 && f.mbits >= 0 && f.mbits <= 10 && f.nan_style != kE8m0 &&
         (f.container == 0 || f.container == 8 || f.container == 16 || f.container == 32);
}

FastKind fast_eligible(const Params& P) {
  // multi-pass instructions (core passes.h: passes over k subsets, c added last) have no
  // vector kernel: the per-element core chain runs them
  if (P.multipass()) return FastKind::kNone;
  switch (P.op) {
    case kFma:
      // a chain of IEEE fma per lane: only the output precision and the epilogue matter
      return (P.rho == kRneFp32 || P.rho == kRneFp64) ? FastKind::kFma : FastKind::kNone;
    case kFtzAddMul:
      return (P.rho == kRneFp32 && (P.P == 2 || P.P == 4) && P.fa.ebits > 0 && P.fb.ebits > 0)
                 ? FastKind::kFtz : FastKind::kNone;
    case kTFdpa:
    case kStFdpa: {
      // terms |t| < 2^(F+2) must fit int32; RZ fp32 / E8M13 or RNE fp16 accumulator
      if (P.F < 1 || P.F > 29 || P.L < 1 || P.L > 256) return FastKind::kNone;
      if (P.rho == kRzFp32 || P.rho == kRzE8m13) {
        if (P.fo.ebits != 8 || P.fo.mbits != 23 || P.fo.nan_style != kIeee) return FastKind::kNone;
      } else if (P.rho == kRneFp16) {
        if (P.fo.ebits != 5 || P.fo.mbits != 10 || P.fo.nan_style != kIeee) return FastKind::kNone;
      } else {
        return FastKind::kNone;
      }
      if (!plane_format(P.fa) || !plane_format(P.fb)) return FastKind::kNone;
      if ((P.fa.mbits + 1) + (P.fb.mbits + 1) > 24) return FastKind::kNone;
      if (P.flush_inputs) return FastKind::kNone;
      if (P.op == kStFdpa && (P.fs.nan_style != kE8m0 || P.block < 1)) return FastKind::kNone;
      return FastKind::kFdpa;
    }
    case kTrFdpa:
    case kGtrFdpa: {
      // int32 product sums (per parity for GTR) without overflow; |S| < 2^(F2 + 2 + log2 L)
      // exact in fp64; fp32 accumulator rounded to nearest
      if (P.F < 1 || P.F > 29 || P.L < 1 || P.L > (1 << (29 - P.F))) return FastKind::kNone;
      if (P.F2 < P.F || P.F2 > 40 || P.rho != kRneFp32) return FastKind::kNone;
      if (P.fo.ebits != 8 || P.fo.mbits != 23 || P.fo.nan_style != kIeee) return FastKind::kNone;
      if (!plane_format(P.fa) || !plane_format(P.fb)) return FastKind::kNone;
      if ((P.fa.mbits + 1) + (P.fb.mbits + 1) > 24 || P.flush_inputs) return FastKind::kNone;
      return FastKind::kTr;
    }
    case kEFdpa:
      // values exact in fp32 planes, products exact in fp64 (<= 53 significand bits)
      if (P.rho != kRneFp32 || P.fo.ebits != 8 || P.fo.mbits != 23 || P.fo.nan_style != kIeee)
        return FastKind::kNone;
      if (P.L < 1 || P.L > 256 || P.flush_inputs) return FastKind::kNone;
      if (!plane_format(P.fa) || !plane_format(P.fb) || P.fa.ebits > 8 || P.fb.ebits > 8)
        return FastKind::kNone;
      return FastKind::kE;
    case kGstFdpa: {
      // a group's dot must be exact in fp32: exponent spans + significand bits + log2 G <= 24
      auto span = [](const FormatDesc& f) { return (1 << f.ebits) - 1 + f.mbits + 1; };
      int lg = 0;
      while ((1 << lg) < P.G) ++lg;
      if (P.G < 1 || P.L % P.G != 0 || P.L / P.G > 16 || P.block < 1 || P.block % P.G != 0)
        return FastKind::kNone;
      if (P.F < 1 || P.F > 38 || P.rho != kRzFp32 || P.fo.ebits != 8 || P.fo.mbits != 23 ||
          P.fo.nan_style != kIeee || P.flush_inputs)
        return FastKind::kNone;
      if (!plane_format(P.fa) || !plane_format(P.fb) || span(P.fa) + span(P.fb) + lg > 24)
        return FastKind::kNone;
      if (P.fs.ebits < 1 || P.fs.mbits > 8) return FastKind::kNone;
      return FastKind::kGst;
    }
    default:
      return FastKind::kNone;
  }
}

// For tests and benchmarks: "<isa>:<path>" the CPU kernel takes for this parameter vector
// now ("scalar" when none), e.g. "avx512:fdpa".
static std::string cpu_fast_path(at::IntArrayRef params) {
  TORCH_CHECK_VALUE(params.size() == size_t(kNumParams), "_cpu_fast_path: expected ", kNumParams,
                    " parameters, got ", params.size());
  const FastKind k = fast_eligible(parse_params(params.data()));
  const Isa isa = cpu_isa();
  if (k == FastKind::kNone || isa == Isa::kScalar) return "scalar";
  if ((k == FastKind::kTr || k == FastKind::kE || k == FastKind::kGst) && isa != Isa::kAvx512)
    return "scalar";  // AVX-512 kernels only
  const char* names[] = {"", "fdpa", "fma", "ftz", "tr", "e", "gst"};
  return std::string(isa == Isa::kAvx512 ? "avx512:" : "avx2:") + names[int(k)];
}

TORCH_LIBRARY_FRAGMENT(mma_emu, m) {
  m.def("_cpu_fast_path(int[] params) -> str", &cpu_fast_path);
}

// ---- Ctrl-C ------------------------------------------------------------------------------
static std::atomic<bool> g_interrupted{false};

bool interrupted() { return g_interrupted.load(std::memory_order_relaxed); }

void check_interrupt_main() {
  if (at::get_thread_num() != 0 || !Py_IsInitialized()) return;
  using clk = std::chrono::steady_clock;
  thread_local clk::time_point last{};
  const auto now = clk::now();
  if (now - last < std::chrono::milliseconds(100)) return;
  last = now;
  PyGILState_STATE st = PyGILState_Ensure();
  if (PyErr_CheckSignals() != 0) {  // a handler raised (KeyboardInterrupt): stop every worker
    PyErr_Clear();
    g_interrupted.store(true);
  }
  PyGILState_Release(st);
}

void throw_if_interrupted() {
  if (!g_interrupted.exchange(false)) return;
  {
    PyGILState_STATE st = PyGILState_Ensure();
    PyErr_SetNone(PyExc_KeyboardInterrupt);
    PyGILState_Release(st);
  }
  python_error e;  // torch's op binding restores it: Python sees KeyboardInterrupt
  e.persist();
  throw e;
}

}  // namespace mma
