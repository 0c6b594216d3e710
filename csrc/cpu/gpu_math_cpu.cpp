// CPU kernels of mma_emu::_gpu_math and mma_emu::_fma_f32 (schemas: ops.cpp): the float32
// models of csrc/core/gpu_math.h over a contiguous float32 tensor, and fma.rn.f32 over three.
// The fast path of torch_mma_emu.aten_cuda (torch_mma_emu/gpu_math/fast.py); the NumPy models
// are the reference they are tested against (tests/test_gpu_math_fast.py).
#include <string>
#include <vector>

#include "../core/gpu_math.h"
#include "../torch_stable.h"
#include "fast_paths.h"
#include "fpenv.h"

namespace mma {
namespace {

constexpr const char* kGmNames[] = {
#define MMA_GM_NAME(n) #n,
    MMA_GM_OPS(MMA_GM_NAME)
#undef MMA_GM_NAME
};
constexpr int64_t kTableWords = 3 * (64 + 128 + 128) + 3;   // EX2, RCP, RSQ rows; 3 biases
constexpr int64_t kGrain = int64_t(1) << 14;

void check_f32(const Tensor& t, const char* op, const char* what) {
  MMA_CHECK_VALUE(t.is_cpu(), op, ": ", what, " must be a CPU tensor, got ",
                  device_name(t.device()));
  MMA_CHECK_VALUE(t.scalar_type() == ScalarType::Float, op, ": ", what, " must be float32");
  MMA_CHECK_VALUE(t.is_contiguous(), op, ": ", what, " must be contiguous");
}

// The element loops, compiled twice on x86: for baseline x86-64 and with FMA (std::fma then
// is one instruction instead of a libm call); the choice is cpu_isa()'s (MMA_EMU_SCALAR,
// MMA_EMU_CPU_ISA respected).  The same IEEE operations either way: the bits do not change.
#define MMA_GM_LOOPS(ATTR, SFX)                                                              \
  ATTR void map_##SFX(int code, const float* in, float* o, int64_t lo, int64_t hi,          \
                      const gm::MufuTables& T) {                                            \
    switch (code) {                                                                         \
      case gm::k_exp: for (int64_t i = lo; i < hi; ++i) o[i] = gm::expf_(in[i], T); break;  \
      case gm::k_log: for (int64_t i = lo; i < hi; ++i) o[i] = gm::logf_(in[i]); break;     \
      case gm::k_tanh: for (int64_t i = lo; i < hi; ++i) o[i] = gm::tanhf_(in[i], T); break; \
      case gm::k_erf: for (int64_t i = lo; i < hi; ++i) o[i] = gm::erff_(in[i], T); break;  \
      case gm::k_sigmoid:                                                                   \
        for (int64_t i = lo; i < hi; ++i) o[i] = gm::sigmoid(in[i], T);                     \
        break;                                                                              \
      case gm::k_silu: for (int64_t i = lo; i < hi; ++i) o[i] = gm::silu(in[i], T); break;  \
      case gm::k_gelu: for (int64_t i = lo; i < hi; ++i) o[i] = gm::gelu(in[i], T); break;  \
      case gm::k_gelu_tanh:                                                                 \
        for (int64_t i = lo; i < hi; ++i) o[i] = gm::gelu_tanh(in[i], T);                   \
        break;                                                                              \
      default: for (int64_t i = lo; i < hi; ++i) o[i] = gm::apply(code, in[i], T); break;   \
    }                                                                                       \
  }                                                                                         \
  ATTR void fma_##SFX(const float* a, const float* b, const float* c, float* o, int64_t lo, \
                      int64_t hi) {                                                         \
    for (int64_t i = lo; i < hi; ++i) o[i] = gm::fma(a[i], b[i], c[i]);                     \
  }

MMA_GM_LOOPS(, base)
#if defined(__x86_64__) && defined(__GNUC__)
MMA_GM_LOOPS(__attribute__((target("fma"))), fma3)
#endif

bool use_fma3() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool ok = cpu_isa() != Isa::kScalar && __builtin_cpu_supports("fma");
  return ok;
#else
  return false;
#endif
}

void map_f32(int code, const float* in, float* o, int64_t n, const gm::MufuTables& T) {
  const bool f3 = use_fma3();
  parallel_for(0, n, kGrain, [&](int64_t lo, int64_t hi) {
    FpEnvGuard guard;
#if defined(__x86_64__) && defined(__GNUC__)
    if (f3) return map_fma3(code, in, o, lo, hi, T);
#endif
    map_base(code, in, o, lo, hi, T);
  });
}

// gm::squarer_dropped tabulated once (512 KiB, stays in L2): a lookup instead of ~70 ops.
const uint32_t* dropped_table() {
  static const std::vector<uint32_t> table = [] {
    std::vector<uint32_t> t(gm::kDroppedSize);
    for (uint64_t x = 0; x < gm::kDroppedSize; ++x) t[x] = uint32_t(gm::squarer_dropped(x));
    return t;
  }();
  return table.data();
}

Tensor gpu_math_cpu(const Tensor& x, std::string op, const Tensor& tables) {
  check_f32(x, "_gpu_math", "x");
  int code = -1;
  for (int i = 0; i < gm::kNumOps; ++i)
    if (op == kGmNames[i]) code = i;
  if (code < 0) {
    std::string known;
    for (int i = 0; i < gm::kNumOps; ++i) known += std::string(i ? ", " : "") + kGmNames[i];
    value_error("_gpu_math: unknown function '", op, "'; known: ", known);
  }
  MMA_CHECK_VALUE(tables.is_cpu() && tables.scalar_type() == ScalarType::Long &&
                      tables.is_contiguous() && tables.numel() == kTableWords,
                  "_gpu_math: tables must be a contiguous int64 CPU tensor of ", kTableWords,
                  " words (torch_mma_emu/gpu_math/fast.py builds it)");
  const int64_t* tw = tables.const_data_ptr<int64_t>();
  const gm::MufuTables T{tw, tw + 3 * 64, tw + 3 * 192, uint64_t(tw[kTableWords - 3]),
                         uint64_t(tw[kTableWords - 2]), uint64_t(tw[kTableWords - 1]),
                         dropped_table()};
  Tensor out = torch::stable::empty_like(x);
  const float* in = x.const_data_ptr<float>();
  float* o = out.mutable_data_ptr<float>();
  const int64_t n = x.numel();
  map_f32(code, in, o, n, T);
  return out;
}

Tensor fma_f32_cpu(const Tensor& a, const Tensor& b, const Tensor& c) {
  check_f32(a, "_fma_f32", "a");
  check_f32(b, "_fma_f32", "b");
  check_f32(c, "_fma_f32", "c");
  MMA_CHECK_VALUE(a.numel() == b.numel() && a.numel() == c.numel(),
                  "_fma_f32: a, b, c must have the same number of elements, got ", shape_of(a),
                  ", ", shape_of(b), ", ", shape_of(c));
  Tensor out = torch::stable::empty_like(a);
  const float* pa = a.const_data_ptr<float>();
  const float* pb = b.const_data_ptr<float>();
  const float* pc = c.const_data_ptr<float>();
  float* o = out.mutable_data_ptr<float>();
  const bool f3 = use_fma3();
  parallel_for(0, a.numel(), kGrain, [&](int64_t lo, int64_t hi) {
    FpEnvGuard guard;
#if defined(__x86_64__) && defined(__GNUC__)
    if (f3) return fma_fma3(pa, pb, pc, o, lo, hi);
#endif
    fma_base(pa, pb, pc, o, lo, hi);
  });
  return out;
}

}  // namespace

}  // namespace mma

STABLE_TORCH_LIBRARY_IMPL(mma_emu, CPU, m) {
  m.impl("_gpu_math", TORCH_BOX(&mma::gpu_math_cpu));
  m.impl("_fma_f32", TORCH_BOX(&mma::fma_f32_cpu));
}
