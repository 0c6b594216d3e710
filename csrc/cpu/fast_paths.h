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
