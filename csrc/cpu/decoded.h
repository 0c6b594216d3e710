// Decoded operands of the CPU kernel (shared by the scalar path and the fast paths'
// fallbacks): an (M, K) slab of codes as structure of arrays, what the core's Operand reads.
#pragma once
#include <ATen/Parallel.h>

#include <vector>

#include "../core/chain.h"
#include "../gemm.h"

namespace mma {

struct Decoded {
  std::vector<int32_t> sig, exp;
  std::vector<uint8_t> cls;
  std::vector<uint8_t> row_flags;  // row i holds a NaN or an infinity
  Operand row(int64_t i, int64_t K) const {
    return Operand{sig.data() + i * K, exp.data() + i * K, cls.data() + i * K};
  }
};

inline void decode_rows(const View3& v, int64_t bi, int64_t M, int64_t K, bool transposed,
                        const FormatDesc& f, Decoded& out) {
  out.sig.resize(size_t(M * K));
  out.exp.resize(size_t(M * K));
  out.cls.resize(size_t(M * K));
  out.row_flags.assign(size_t(M), 0);
  at::parallel_for(0, M, 64, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      uint8_t fl = 0;
      for (int64_t k = 0; k < K; ++k) {
        const Dec d = decode(f, transposed ? v.at(bi, k, i) : v.at(bi, i, k));
        const size_t at = size_t(i * K + k);
        out.sig[at] = d.sig;
        out.exp[at] = d.exp;
        out.cls[at] = d.cls;
        fl |= d.cls;
      }
      out.row_flags[size_t(i)] = fl;
    }
  });
}

// Scales stay array-of-structs (one Dec per K-block).
inline void decode_scales(const View3& v, int64_t bi, int64_t M, int64_t nb, bool transposed,
                          const FormatDesc& f, std::vector<Dec>& out,
                          std::vector<uint8_t>& flags) {
  out.resize(size_t(M * nb));
  flags.assign(size_t(M), 0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < nb; ++k) {
      out[size_t(i * nb + k)] = decode(f, transposed ? v.at(bi, k, i) : v.at(bi, i, k));
      flags[size_t(i)] |= out[size_t(i * nb + k)].cls;
    }
}

}  // namespace mma
