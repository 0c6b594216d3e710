// CPU kernels of mma_emu::_gpu_math and mma_emu::_fma_f32 (schemas: ops.cpp): the float32
// models of csrc/core/gpu_math.h over a contiguous float32 tensor, and fma.rn.f32 over three.
// The fast path of torch_mma_emu.aten_cuda (torch_mma_emu/gpu_math/fast.py); the NumPy models
// are the reference they are tested against (tests/test_gpu_math_fast.py).
#include <algorithm>
#include <string>
#include <vector>

#include "../torch_stable.h"
#include "fast_paths.h"
#include "fpenv.h"

// The models' loops are written without branches (selects): FP operations may then be
// speculated, which -ftrapping-math (GCC's default) forbids.  No trap is ever enabled here and
// the IEEE results do not depend on it (rounding, contraction and fast-math are unchanged);
// it lets the avx2 clones vectorise.  Before the core header, so its functions get it too.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include "../gpu_math_ops.h"

namespace mma {
namespace {

constexpr int64_t kGrain = int64_t(1) << 14;

void check_f32(const Tensor& t, const char* op, const char* what) {
  MMA_CHECK_VALUE(t.is_cpu(), op, ": ", what, " must be a CPU tensor, got ",
                  device_name(t.device()));
  MMA_CHECK_VALUE(t.scalar_type() == ScalarType::Float, op, ": ", what, " must be float32");
  MMA_CHECK_VALUE(t.is_contiguous(), op, ": ", what, " must be contiguous");
}

struct Strided2 {   // a float32 [R, C] operand: element (r, j) at p[r * s0 + j * s1]
  const float* p;
  int64_t s0, s1;
};

// The element loops, compiled twice on x86: for baseline x86-64 and with FMA (std::fma then
// is one instruction instead of a libm call); the choice is cpu_isa()'s (MMA_EMU_SCALAR,
// MMA_EMU_CPU_ISA respected).  The same IEEE operations either way: the bits do not change.
#define MMA_GM_LOOPS(ATTR, SFX)                                                              \
  template <int OP>                                                                         \
  ATTR void map_##SFX(const float* __restrict in, float* __restrict o, int64_t lo,          \
                      int64_t hi, const gm::MufuTables& tables) {                           \
    const gm::MufuTables T = tables;   /* one loop per function: each vectorises alone */  \
    for (int64_t i = lo; i < hi; ++i) o[i] = gm::apply(OP, in[i], T);                       \
  }                                                                                         \
  ATTR void fma_##SFX(const Strided2* in, float* o, int64_t C, int64_t r0, int64_t r1) {  \
    const Strided2 a = in[0], b = in[1], c = in[2];                                         \
    for (int64_t r = r0; r < r1; ++r) {                                                     \
      const float *pa = a.p + r * a.s0, *pb = b.p + r * b.s0, *pc = c.p + r * c.s0;         \
      float* po = o + r * C;                                                                \
      if (a.s1 == 1 && b.s1 == 1 && c.s1 == 1) {   /* rows read in place: a plain loop */  \
        for (int64_t j = 0; j < C; ++j) po[j] = gm::fma(pa[j], pb[j], pc[j]);               \
      } else {                                                                              \
        for (int64_t j = 0; j < C; ++j)                                                     \
          po[j] = gm::fma(pa[j * a.s1], pb[j * b.s1], pc[j * c.s1]);                        \
      }                                                                                     \
    }                                                                                       \
  }

MMA_GM_LOOPS(, base)
#if defined(__x86_64__) && defined(__GNUC__)
MMA_GM_LOOPS(__attribute__((target("fma"))), fma3)
MMA_GM_LOOPS(__attribute__((target("avx2,fma"))), avx2)
// tanhf (two table units in one loop) vectorises only with the hardware gathers that GCC's
// generic tuning leaves off; the other loops keep the generic tuning (gathers are slow on
// some cores)
MMA_GM_LOOPS(__attribute__((target("avx2,fma,tune=skylake"))), avx2g)
#endif

bool use_avx2() {
#if defined(__x86_64__) && defined(__GNUC__)
  return cpu_isa() != Isa::kScalar && __builtin_cpu_supports("avx2") &&
         __builtin_cpu_supports("fma");          // read per call, as the GEMM kernels do
#else
  return false;
#endif
}

bool use_fma3() {
#if defined(__x86_64__) && defined(__GNUC__)
  return cpu_isa() != Isa::kScalar && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

template <int OP>
void map_op(const float* in, float* o, int64_t n, const gm::MufuTables& T) {
  const bool f3 = use_fma3(), v8 = use_avx2();
  parallel_for(0, n, kGrain, [&](int64_t lo, int64_t hi) {
    FpEnvGuard guard;
#if defined(__x86_64__) && defined(__GNUC__)
    if (v8 && (OP == gm::k_tanh || OP == gm::k_gelu_tanh)) return map_avx2g<OP>(in, o, lo, hi, T);
    if (v8) return map_avx2<OP>(in, o, lo, hi, T);
    if (f3) return map_fma3<OP>(in, o, lo, hi, T);
#endif
    map_base<OP>(in, o, lo, hi, T);
  });
}

void map_f32(int code, const float* in, float* o, int64_t n, const gm::MufuTables& T) {
  switch (code) {
#define MMA_GM_CASE(name) \
    case gm::k_##name: return map_op<gm::k_##name>(in, o, n, T);
    MMA_GM_OPS(MMA_GM_CASE)
#undef MMA_GM_CASE
    default: value_error("_gpu_math: function code ", code, " out of range");
  }
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
  const int code = gm_code(op);
  MMA_CHECK_VALUE(tables.is_cpu(), "_gpu_math: tables must be on the CPU with x");
  check_tables(tables);
  const int64_t* tw = tables.const_data_ptr<int64_t>();
  gm::MufuTables T = mufu_tables(tw, tw);
  T.dropped = dropped_table();
  Tensor out = torch::stable::empty_like(x);
  const float* in = x.const_data_ptr<float>();
  float* o = out.mutable_data_ptr<float>();
  const int64_t n = x.numel();
  map_f32(code, in, o, n, T);
  return out;
}

// fma.rn.f32 over three float32 [R, C] operands with any strides (0: broadcast); the result
// is a new contiguous [R, C] tensor.
Tensor fma_f32_cpu(const Tensor& a, const Tensor& b, const Tensor& c) {
  const Tensor* ops[3] = {&a, &b, &c};
  for (const Tensor* t : ops) {
    MMA_CHECK_VALUE(t->is_cpu() && t->scalar_type() == ScalarType::Float && t->dim() == 2,
                    "_fma_f32: a, b, c must be 2-D float32 CPU tensors, got ", shape_of(*t));
    MMA_CHECK_VALUE(t->size(0) == a.size(0) && t->size(1) == a.size(1),
                    "_fma_f32: a, b, c must have one shape, got ", shape_of(a), ", ",
                    shape_of(b), ", ", shape_of(c));
  }
  const int64_t R = a.size(0), C = a.size(1);
  Tensor out = torch::stable::new_empty(a, {R, C});
  Strided2 in[3];
  for (int k = 0; k < 3; ++k)
    in[k] = {ops[k]->const_data_ptr<float>(), ops[k]->stride(0), ops[k]->stride(1)};
  float* o = out.mutable_data_ptr<float>();
  const bool f3 = use_fma3(), v8 = use_avx2();
  parallel_for(0, R, std::max<int64_t>(1, kGrain / std::max<int64_t>(C, 1)),
               [&](int64_t r0, int64_t r1) {
                 FpEnvGuard guard;
#if defined(__x86_64__) && defined(__GNUC__)
                 if (v8) return fma_avx2(in, o, C, r0, r1);
                 if (f3) return fma_fma3(in, o, C, r0, r1);
#endif
                 fma_base(in, o, C, r0, r1);
               });
  return out;
}

// The per-thread loop of vectorized_layer_norm_kernel (torch_mma_emu/aten_cuda/norms.py,
// _welford): thread t of `threads` folds the `vec`-vectors t, t + threads, ... of each row
// element by element into (mean, m2, count): delta = x - mean, count += 1,
// mean = fma(delta, 1/count, mean), m2 = fma(delta, x - mean, m2); rms_norm: m2 = fma(x, x, m2)
// only.  Returns [3, rows, threads] (mean, m2, count) as float32.
// The threads' chains are independent: the loop runs them side by side (the inner loop over
// threads vectorises), each thread's own elements still in its order.
#define MMA_WELFORD_LOOP(ATTR, SFX)                                                          \
  ATTR void welford_##SFX(const float* __restrict X, float* __restrict st, int64_t R,       \
                          int64_t N, int64_t T, int64_t vec, bool rms, int64_t r0,          \
                          int64_t r1) {                                                     \
    const int64_t nv = N / vec;                                                             \
    std::vector<float> buf(3 * size_t(T));                                                  \
    float* __restrict mean = buf.data();                                                    \
    float* __restrict m2 = mean + T;                                                        \
    float* __restrict cnt = m2 + T;                                                         \
    for (int64_t r = r0; r < r1; ++r) {                                                     \
      std::fill(buf.begin(), buf.end(), 0.0f);                                              \
      const float* __restrict row = X + r * N;                                              \
      for (int64_t v0 = 0; v0 < nv; v0 += T) {                                              \
        const int64_t live = std::min<int64_t>(T, nv - v0);                                 \
        const float* __restrict blk = row + v0 * vec;                                       \
        for (int64_t i = 0; i < vec; ++i) {                                                 \
          if (rms) {                                                                        \
            for (int64_t t = 0; t < live; ++t) {                                            \
              const float x = blk[t * vec + i];                                             \
              m2[t] = gm::fma(x, x, m2[t]);                                                 \
            }                                                                               \
          } else {                                                                          \
            for (int64_t t = 0; t < live; ++t) {                                            \
              const float x = blk[t * vec + i];                                             \
              const float delta = x - mean[t];                                              \
              const float c = cnt[t] + 1.0f;                                                \
              const float nm = gm::fma(delta, 1.0f / c, mean[t]);                           \
              m2[t] = gm::fma(delta, x - nm, m2[t]);                                        \
              mean[t] = nm;                                                                 \
              cnt[t] = c;                                                                   \
            }                                                                               \
          }                                                                                 \
        }                                                                                   \
      }                                                                                     \
      for (int64_t t = 0; t < T; ++t) {                                                     \
        st[r * T + t] = mean[t];                                                            \
        st[(R + r) * T + t] = m2[t];                                                        \
        st[(2 * R + r) * T + t] = cnt[t];                                                   \
      }                                                                                     \
    }                                                                                       \
  }

MMA_WELFORD_LOOP(, base)
#if defined(__x86_64__) && defined(__GNUC__)
MMA_WELFORD_LOOP(__attribute__((target("fma"))), fma3)
MMA_WELFORD_LOOP(__attribute__((target("avx2,fma"))), avx2)
#endif

Tensor welford_f32_cpu(const Tensor& x, int64_t threads, int64_t vec, bool rms) {
  check_f32(x, "_welford_f32", "x");
  MMA_CHECK_VALUE(x.dim() == 2, "_welford_f32: x must be 2-D (rows, N), got ", shape_of(x));
  MMA_CHECK_VALUE(threads >= 1 && vec >= 1 && x.size(1) % vec == 0,
                  "_welford_f32: threads and vec must be positive and divide the row: N = ",
                  x.size(1), ", vec = ", vec);
  const int64_t R = x.size(0), N = x.size(1);
  Tensor out = torch::stable::new_empty(x, {3, R, threads});
  const float* X = x.const_data_ptr<float>();
  float* st = out.mutable_data_ptr<float>();
  const bool f3 = use_fma3(), v8 = use_avx2();
  parallel_for(0, R, std::max<int64_t>(1, kGrain / std::max<int64_t>(N, 1)),
               [&](int64_t r0, int64_t r1) {
                 FpEnvGuard guard;
#if defined(__x86_64__) && defined(__GNUC__)
                 if (v8) return welford_avx2(X, st, R, N, threads, vec, rms, r0, r1);
                 if (f3) return welford_fma3(X, st, R, N, threads, vec, rms, r0, r1);
#endif
                 welford_base(X, st, R, N, threads, vec, rms, r0, r1);
               });
  return out;
}

}  // namespace

}  // namespace mma

STABLE_TORCH_LIBRARY_IMPL(mma_emu, CPU, m) {
  m.impl("_gpu_math", TORCH_BOX(&mma::gpu_math_cpu));
  m.impl("_fma_f32", TORCH_BOX(&mma::fma_f32_cpu));
  m.impl("_welford_f32", TORCH_BOX(&mma::welford_f32_cpu));
}
