// Run-time choice of the CPU fast paths (ISA, MMA_EMU_SCALAR, MMA_EMU_CPU_ISA), the K block
// budget, the _cpu_fast_path op, and Ctrl-C handling for long calls (the eligibility test
// itself is eligible.cpp).
#include <Python.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "fast_paths.h"

namespace mma {

namespace {
// The best instruction set this CPU and build have: found once (the environment variables
// that cap it are read per call).
Isa best_isa() {
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
#elif defined(__aarch64__)
  best = Isa::kNeon;  // Advanced SIMD is part of every AArch64 CPU
#endif
  if (best != Isa::kScalar && !isa_has_kernels(best)) best = Isa::kScalar;  // MMA_EMU_NO_SIMD
  return best;
}
}  // namespace

Isa cpu_isa() {
  const char* s = std::getenv("MMA_EMU_SCALAR");
  if (s && s[0] && std::strcmp(s, "0") != 0) return Isa::kScalar;
  static const Isa best = best_isa();  // (thread-safe initialisation)
  const char* cap = std::getenv("MMA_EMU_CPU_ISA");
  if (cap && std::strcmp(cap, "scalar") == 0) return Isa::kScalar;
  if (cap && std::strcmp(cap, "avx2") == 0 && best == Isa::kAvx512) return Isa::kAvx2;
  return best;
}

int64_t block_bytes() {
  const char* s = std::getenv("MMA_EMU_CPU_BLOCK_BYTES");
  const long long v = s ? std::atoll(s) : 0;
  return v > 0 ? int64_t(v) : int64_t(32) << 20;
}

// For tests and benchmarks: "<isa>:<path>" the CPU kernel takes for this parameter vector
// now ("scalar" when none), e.g. "avx512:fdpa".
std::string cpu_fast_path(const IntList& params) {
  MMA_CHECK_VALUE(params.size() == size_t(kNumParams), "_cpu_fast_path: expected ", kNumParams,
                  " parameters, got ", params.size());
  const FastKind k = fast_eligible(parse_params(params.data()));
  const Isa isa = cpu_isa();
  if (k == FastKind::kNone || isa == Isa::kScalar) return "scalar";
  const char* names[] = {"", "fdpa", "fma", "ftz", "tr", "e", "gst"};
  return std::string(isa_name(isa)) + ":" + names[int(k)];
}

// ---- Ctrl-C ------------------------------------------------------------------------------
static std::atomic<bool> g_interrupted{false};

bool interrupted() { return g_interrupted.load(std::memory_order_relaxed); }

void check_interrupt_main() {
  uint32_t thread = 0;  // 0 outside a parallel region and on the calling thread
  if (torch_get_thread_idx(&thread) != TORCH_SUCCESS || thread != 0 || !Py_IsInitialized())
    return;
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
  // a stable kernel can only throw a C++ exception (Python sees RuntimeError with its text):
  // torch_mma_emu/cpp.py (call) raises KeyboardInterrupt for this tag
  if (g_interrupted.exchange(false)) throw std::runtime_error(kInterruptTag);
}

}  // namespace mma
