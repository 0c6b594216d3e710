// Vectorised fast paths of the CPU kernel and their run-time selection.
//
// Every fast path is bit-identical to the scalar chain of csrc/core by construction (see
// docs/cpu_fast.md): it either performs the same IEEE operations per output lane (FMA chain,
// FTZ-AddMul) or computes the core's exact fixed-point terms with exact float operations
// (T-FDPA / ST-FDPA) and hands every lane it cannot finish exactly to the core.
#pragma once
#include <cstdint>

#include "../gemm.h"
#include "fdpa_engine.h"

namespace mma {

// The instruction set the fast paths may use for this call: MMA_EMU_SCALAR=1 forces the scalar
// path, MMA_EMU_CPU_ISA=avx2|scalar caps it (read per call, so tests can switch).
Isa cpu_isa();

// The vectorised FDPA kernels (T-, ST-, TR-, GTR-, E-, GST-FDPA) as a building block: one
// batch element's operands in planes, then chains over any K range for a block of rows.  The
// schedule kernel (sched_cpu.cpp) runs split-K slices and promotion blocks through it.
class FdpaPanels {
 public:
  // false (nothing prepared) when this ISA or parameter vector has no vector path (also for
  // multi-pass instructions: a slice may start inside an instruction).  The planes live in
  // thread-local storage: valid until the next prepare on this thread.
  bool prepare(const Params& P, const Decoded& A, const Decoded& B, const Dec* SA,
               const Dec* SB, const uint8_t* fsa, const uint8_t* fsb, int64_t nblk, int64_t M,
               int64_t N, int64_t K);
  int64_t width() const { return eng_->width(); }  // accumulator row length: N padded to the panels
  bool ok(int64_t i, int64_t j) const { return eng_->row_ok(i) && eng_->col_ok(j); }
  bool row_ok(int64_t i) const { return eng_->row_ok(i); }
  bool col_ok(int64_t j) const { return eng_->col_ok(j); }
  // Advances acc (rows [i0, i1), row stride ld; fp32 words of output-format values) over the
  // chunks of products [k0, k1), k0 a multiple of L.  Elements with !ok(i, j) are untouched.
  void run(int64_t i0, int64_t i1, int64_t k0, int64_t k1, uint32_t* acc, int64_t ld) const {
    eng_->run(i0, i1, k0, k1, acc, ld);
  }

 private:
  const FdpaEngine* eng_ = nullptr;
};

// The FMA-chain / FTZ-AddMul kernels (fast_values.cpp) the same way: a (M, K) and b (K, N)
// of one batch element, any strides; fp32 values, or fp64 for the fp64 FMA chain.
class ValuePanels {
 public:
  bool prepare(const Params& P, const Tensor& a, const Tensor& b);
  int64_t width() const;
  // rows [i0, i1) of acc (stride ld) advanced over the products [k0, k1): exact for every
  // lane (NaN and Inf included), no hand-back to the core.  acc's type is the values'.
  void run(int64_t i0, int64_t i1, int64_t k0, int64_t k1, float* acc, int64_t ld) const;
  void run(int64_t i0, int64_t i1, int64_t k0, int64_t k1, double* acc, int64_t ld) const;

 private:
  const void* pk_ = nullptr;  // fast_values.cpp's thread-local packed operands
  bool f64_ = false;
};

// How the vector kernels' parallel loops split an (M x N) product: tasks of one row block and
// a range of column panels.  Panels split where the row blocks alone would leave threads
// idle (short-wide products, x^T A GEMVs), and (panel_bytes: a panel's planes) into chunks of
// at most kPanelChunkBytes, which stay in a core's L2 while its row blocks sweep them: tasks
// run chunk by chunk, so B's planes come from memory once and A's once per chunk (at
// 1024^3, one chunk of 32 panels read B 64 times: the kernel ran 7-12% slower than with B in
// L2).  Which task computes an output never changes its operations: the bits do not depend
// on the split.
struct Tiles {
  static constexpr int64_t kPanelChunkBytes = int64_t(768) << 10;
  int64_t nrb = 1, np = 1, npc = 1;  // row blocks, panels, panel chunks
  Tiles(int64_t nrb_, int64_t np_, int64_t panel_bytes = 0) : nrb(nrb_), np(np_) {
    const int64_t want = 4 * num_threads();
    if (nrb < want) npc = std::max<int64_t>(1, std::min(np, (want + nrb - 1) / nrb));
    npc = std::max(npc, std::min(np, (np * panel_bytes + kPanelChunkBytes - 1) / kPanelChunkBytes));
  }
  int64_t count() const { return nrb * npc; }
  int64_t rb(int64_t t) const { return t % nrb; }
  int64_t p0(int64_t t) const { return t / nrb * np / npc; }
  int64_t p1(int64_t t) const { return (t / nrb + 1) * np / npc; }
};

// The fused ops' CPU kernel for one batch element, K in blocks (bounded working memory):
// decode a K block, run the vector kernels where they serve and the core elsewhere, carry
// the accumulators to the next block.  fast: use the vector kernels if this ISA has them.
void fused_batch(const Params& P, const View3& va, const View3& vbt, const View3* vs,
                 const View3& vc, int64_t bi, int64_t M, int64_t N, int64_t K, uint8_t* out,
                 int oes, bool fast, int64_t budget);

// FMA chain (fp32/fp64) and FTZ-AddMul on IEEE values: a (Bt, M, K), b (Bt, K, N), any
// strides; c broadcast view; out contiguous (Bt, M, N).  false when not served.
bool fast_values(const Params& P, const Tensor& a, const Tensor& b, const Tensor& c,
                 Tensor& out);

// Working-memory budget of one K block (decoded operands, planes, packed values): 32 MiB, or
// MMA_EMU_CPU_BLOCK_BYTES (read per call; tests force tiny blocks with it).
// With n threads each running its own product (batch-parallel), each gets block_bytes() / n.
int64_t block_bytes();

// Ctrl-C: true once the user interrupted the current call (checked between work blocks).
bool interrupted();
void check_interrupt_main();  // on the calling thread: polls Python's signal handlers
void throw_if_interrupted();  // after a parallel region: raises KeyboardInterrupt

}  // namespace mma
