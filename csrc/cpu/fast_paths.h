// Vectorised fast paths of the CPU kernel and their run-time selection.
//
// Every fast path is bit-identical to the scalar chain of csrc/core by construction (see
// docs/cpu_fast.md): it either performs the same IEEE operations per output lane (FMA chain,
// FTZ-AddMul) or computes the core's exact fixed-point terms with exact float operations
// (T-FDPA / ST-FDPA) and hands every lane it cannot finish exactly to the core.
#pragma once
#include <cstdint>

#include "decoded.h"

namespace mma {

enum class Isa : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };
enum class FastKind : int { kNone = 0, kFdpa, kFma, kFtz, kTr, kE, kGst };

// The instruction set the fast paths may use for this call: MMA_EMU_SCALAR=1 forces the scalar
// path, MMA_EMU_CPU_ISA=avx2|scalar caps it (read per call, so tests can switch).
Isa cpu_isa();

// The one eligibility test: which fast path serves this parameter vector, checking every
// Params field the fast paths rely on.  Anything unknown falls back to the scalar path.
FastKind fast_eligible(const Params& P);

struct Planes;  // fast_fdpa.cpp: the operands as value / exponent planes

// The vectorised FDPA kernels (T-, ST-, TR-, GTR-, E-, GST-FDPA) as a building block: one
// batch element's operands in planes, then chains over any K range for a block of rows.  The
// schedule kernel (sched_cpu.cpp) runs split-K slices and promotion blocks through it.
class FdpaPanels {
 public:
  // false (nothing prepared) when this ISA or parameter vector has no vector path.  The
  // planes live in thread-local storage: valid until the next prepare on this thread.
  bool prepare(const Params& P, const Decoded& A, const Decoded& B, const Dec* SA,
               const Dec* SB, const uint8_t* fsa, const uint8_t* fsb, int64_t nblk, int64_t M,
               int64_t N, int64_t K);
  int64_t width() const;                // accumulator row length: N padded to the panels
  bool ok(int64_t i, int64_t j) const;  // the vector code computes (i, j); else the core must
  bool row_ok(int64_t i) const;
  bool col_ok(int64_t j) const;
  // Advances acc (rows [i0, i1), row stride ld; fp32 words of output-format values) over the
  // chunks of products [k0, k1), k0 a multiple of L.  Elements with !ok(i, j) are untouched.
  void run(int64_t i0, int64_t i1, int64_t k0, int64_t k1, uint32_t* acc, int64_t ld) const;

 private:
  const Params* P_ = nullptr;
  Planes* pl_ = nullptr;
  const Decoded *A_ = nullptr, *B_ = nullptr;
  const Dec *SA_ = nullptr, *SB_ = nullptr;
  int64_t nblk_ = 0;
  int kind_ = 0;
};

// The FMA-chain / FTZ-AddMul kernels (fast_values.cpp) the same way: a (M, K) and b (K, N)
// of one batch element, any strides; fp32 values, or fp64 for the fp64 FMA chain.
class ValuePanels {
 public:
  bool prepare(const Params& P, const at::Tensor& a, const at::Tensor& b);
  int64_t width() const;
  // rows [i0, i1) of acc (stride ld) advanced over the products [k0, k1): exact for every
  // lane (NaN and Inf included), no hand-back to the core.  acc's type is the values'.
  void run(int64_t i0, int64_t i1, int64_t k0, int64_t k1, float* acc, int64_t ld) const;
  void run(int64_t i0, int64_t i1, int64_t k0, int64_t k1, double* acc, int64_t ld) const;

 private:
  const void* pk_ = nullptr;  // fast_values.cpp's thread-local packed operands
  bool f64_ = false;
};

// fp16 accumulators live in the fast kernels as the fp32 word of the same value; these two
// conversions are exact for every fp16 code (NaN payloads included).
inline uint32_t f32_bits_of_f16(uint32_t h) {
  const uint32_t s = (h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023;
  if (e == 31) return s | 0x7F800000u | (m << 13);
  if (e == 0) return m ? (s | bits_of(float(m) * f32_of(uint32_t(127 - 24) << 23))) : s;
  return s | ((e + 112) << 23) | (m << 13);
}
inline uint32_t f16_bits_of_f32(uint32_t f) {  // f holds an fp16 value (or NaN / Inf)
  const uint32_t s = (f >> 31) << 15, E = (f >> 23) & 255, m = f & 0x7FFFFF;
  if (E == 255) return s | 0x7C00u | (m >> 13);
  if (E == 0) return s;
  const int32_t e = int32_t(E) - 127;
  if (e >= -14) return s | (uint32_t(e + 15) << 10) | (m >> 13);
  return s | ((0x800000u | m) >> (13 - 14 - e));
}

// T-FDPA / ST-FDPA for one batch element; false when this ISA has no such path (nothing was
// written).  A, B: decoded (M, K) and (N, K) slabs; SA/SB: scale decodes (M|N, nblk) or null.
bool fast_fdpa_batch(const Params& P, const Decoded& A, const Decoded& B, const Dec* SA,
                     const Dec* SB, const uint8_t* fsa, const uint8_t* fsb, int64_t nblk,
                     int64_t M, int64_t N, int64_t K, const View3& vc, int64_t bi,
                     uint8_t* out, int oes);

// FMA chain (fp32/fp64) and FTZ-AddMul on IEEE values: a (Bt, M, K), b (Bt, K, N), any
// strides; c broadcast view; out contiguous (Bt, M, N).  false when not served.
bool fast_values(const Params& P, const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                 at::Tensor& out);

// Ctrl-C: true once the user interrupted the current call (checked between work blocks).
bool interrupted();
void check_interrupt_main();  // on the calling thread: polls Python's signal handlers
void throw_if_interrupted();  // after a parallel region: raises KeyboardInterrupt

}  // namespace mma
