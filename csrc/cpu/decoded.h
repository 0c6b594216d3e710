// Decoding the CPU kernel's operands (Decoded, fdpa_engine.h: what the core's Operand reads)
// from strided tensor views, in parallel: whole rows, or one K block of them.
#pragma once
#include <algorithm>
#include <vector>

#include "../core/chain.h"
#include "../gemm.h"
#include "fdpa_engine.h"

namespace mma {

// Rows [0, M) of k in [k0, k0 + K) into out (M x K).  transposed: row i is column i of v
// (read in tiles of 16 columns, so each pass over k reads memory in order).
inline void decode_rows(const View3& v, int64_t bi, int64_t M, int64_t k0, int64_t K,
                        bool transposed, const FormatDesc& f, Decoded& out) {
  out.resize(M, K);
  constexpr int64_t kTile = 16;
  parallel_for(0, (M + kTile - 1) / kTile, grain_for(kTile * K * 4), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t r0 = t * kTile, r1 = std::min(M, r0 + kTile);
      if (!transposed) {
        for (int64_t i = r0; i < r1; ++i)
          out.decode_row(i, K, f, [&](int64_t k) { return v.at(bi, i, k0 + k); });
        continue;
      }
      uint8_t fl[kTile] = {};
      for (int64_t k = 0; k < K; ++k)
        for (int64_t i = r0; i < r1; ++i) {
          const Dec d = decode(f, v.at(bi, k0 + k, i));
          const size_t at = size_t(i * K + k);
          out.sig[at] = d.sig;
          out.exp[at] = d.exp;
          out.cls[at] = d.cls;
          fl[i - r0] |= d.cls;
        }
      for (int64_t i = r0; i < r1; ++i) out.row_flags[size_t(i)] = fl[i - r0];
    }
  });
}
inline void decode_rows(const View3& v, int64_t bi, int64_t M, int64_t K, bool transposed,
                        const FormatDesc& f, Decoded& out) {
  decode_rows(v, bi, M, 0, K, transposed, f, out);
}

// Scales stay array-of-structs (one Dec per K-block): blocks [b0, b0 + nb).
inline void decode_scales(const View3& v, int64_t bi, int64_t M, int64_t b0, int64_t nb,
                          bool transposed, const FormatDesc& f, std::vector<Dec>& out,
                          std::vector<uint8_t>& flags) {
  out.resize(size_t(M * nb));
  flags.assign(size_t(M), 0);
  parallel_for(0, M, grain_for(nb * 4), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      for (int64_t k = 0; k < nb; ++k) {
        out[size_t(i * nb + k)] = decode(f, transposed ? v.at(bi, b0 + k, i) : v.at(bi, i, b0 + k));
        flags[size_t(i)] |= out[size_t(i * nb + k)].cls;
      }
  });
}
inline void decode_scales(const View3& v, int64_t bi, int64_t M, int64_t nb, bool transposed,
                          const FormatDesc& f, std::vector<Dec>& out,
                          std::vector<uint8_t>& flags) {
  decode_scales(v, bi, M, 0, nb, transposed, f, out, flags);
}

}  // namespace mma
