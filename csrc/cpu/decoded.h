// Decoding the CPU kernel's operands (Decoded, fdpa_engine.h: what the core's Operand reads)
// from strided tensor views, in parallel: whole rows, or one K block of them.
#pragma once
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "../core/chain.h"
#include "../gemm.h"
#include "decode_fast.h"
#include "fdpa_engine.h"

namespace mma {

// Called on each run of k a decoder has written: rows [r0, r1), k in [k0, k0 + n) of the
// block (FdpaEngine::fill_a / fill_b build their planes while the run is in cache).
using RunSink = std::function<void(int64_t r0, int64_t r1, int64_t k0, int64_t n)>;

namespace detail {

template <class T>
inline T load_code(const uint8_t* p) {
  T c;
  std::memcpy(&c, p, sizeof c);
  return c;
}

// decode_rows through a run decoder run(codes, n, sig, exp, cls) -> flags (decode_fast.h).
// Row i's code k lies at i * sr + k * sk: rows contiguous along k are decoded in place, row
// by row; others are first gathered into runs of codes, a tile of 32 rows x kChunk k at a
// time, in the order that reads memory in order (B's columns: k outer, and a tile of fp16
// columns is a whole cache line of each k), then decoded run by run.  Rows K apart (a power
// of two, often) share cache sets: the runs are long and the buffer's rows padded.
template <class T, class Run>
inline void decode_rows_runs(const View3& v, int64_t bi, int64_t M, int64_t k0, int64_t K,
                             bool transposed, Decoded& out, const Run& run, const RunSink* sink) {
  constexpr int64_t kTile = 32, kChunk = 2048, kStride = kChunk + 32;
  const int64_t sr = transposed ? v.s2 : v.s1, sk = transposed ? v.s1 : v.s2;
  const uint8_t* base = v.base + bi * v.s0 + k0 * sk;
  const bool in_place = sk == int64_t(sizeof(T)), k_outer = std::abs(sr) < std::abs(sk);
  parallel_for(0, (M + kTile - 1) / kTile, grain_for(kTile * K * 4), [&](int64_t lo, int64_t hi) {
    thread_local std::vector<T> this_thread_buf;
    std::vector<T>& bufv = this_thread_buf;
    if (!in_place) bufv.resize(size_t(kTile * kStride));
    T* buf = bufv.data();
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t r0 = t * kTile, nr = std::min(M, r0 + kTile) - r0;
      if (in_place) {
        for (int64_t i = 0; i < nr; ++i) {
          const size_t at = size_t((r0 + i) * K);
          out.row_flags[size_t(r0 + i)] = run(reinterpret_cast<const T*>(base + (r0 + i) * sr), K,
                                              out.sig.data() + at, out.exp.data() + at, out.cls.data() + at);
          if (sink) (*sink)(r0 + i, r0 + i + 1, 0, K);
        }
        continue;
      }
      uint8_t fl[kTile] = {};
      for (int64_t kc = 0; kc < K; kc += kChunk) {
        const int64_t n = std::min(kChunk, K - kc);
        const uint8_t* p0 = base + r0 * sr + kc * sk;
        if (k_outer) {
          for (int64_t k = 0; k < n; ++k)
            for (int64_t i = 0; i < nr; ++i) buf[i * kStride + k] = load_code<T>(p0 + k * sk + i * sr);
        } else {
          for (int64_t i = 0; i < nr; ++i)
            for (int64_t k = 0; k < n; ++k) buf[i * kStride + k] = load_code<T>(p0 + i * sr + k * sk);
        }
        for (int64_t i = 0; i < nr; ++i) {
          const size_t at = size_t((r0 + i) * K + kc);
          fl[i] |= run(buf + i * kStride, n, out.sig.data() + at, out.exp.data() + at, out.cls.data() + at);
        }
        if (sink) (*sink)(r0, r0 + nr, kc, n);
      }
      for (int64_t i = 0; i < nr; ++i) out.row_flags[size_t(r0 + i)] = fl[i];
    }
  });
}

}  // namespace detail

// Rows [0, M) of k in [k0, k0 + K) into out (M x K).  transposed: row i is column i of v
// (read in tiles of columns, so each pass over k reads memory in order).  1-byte codes,
// fp16, bf16 and tf32 / xf32 take the fast decoders of decode_fast.h (the bits of decode()).
// sink: called on every run written (all rows, all k), or null.
inline void decode_rows(const View3& v, int64_t bi, int64_t M, int64_t k0, int64_t K,
                        bool transposed, const FormatDesc& f, Decoded& out,
                        const RunSink* sink = nullptr) {
  out.resize(M, K);
  switch (dec_path(f, v.esize)) {
    case DecPath::kLut8: {
      const DecLut& t = dec_lut(f);
      detail::decode_rows_runs<uint8_t>(v, bi, M, k0, K, transposed, out,
                                        [&t](const uint8_t* s, int64_t n, int32_t* sg, int32_t* ex, uint8_t* cl) {
                                          return decode_lut8(t, s, n, sg, ex, cl);
                                        }, sink);
      return;
    }
    case DecPath::kE4m3Fn:
    case DecPath::kE5m2:
    case DecPath::kE4m3Fnuz:
    case DecPath::kE5m2Fnuz: {
      const DecPath path = dec_path(f, v.esize);
      const int32_t bias = f.bias;
      detail::decode_rows_runs<uint8_t>(v, bi, M, k0, K, transposed, out,
                                        [path, bias](const uint8_t* s, int64_t n, int32_t* sg, int32_t* ex, uint8_t* cl) {
                                          return decode_fp8(path, s, n, bias, sg, ex, cl);
                                        }, sink);
      return;
    }
    case DecPath::kFp16:
    case DecPath::kBf16: {
      const bool h = dec_path(f, v.esize) == DecPath::kFp16;
      const int32_t bias = f.bias;
      detail::decode_rows_runs<uint16_t>(v, bi, M, k0, K, transposed, out,
                                         [h, bias](const uint16_t* s, int64_t n, int32_t* sg, int32_t* ex, uint8_t* cl) {
                                           return h ? decode_fp16(s, n, bias, sg, ex, cl)
                                                    : decode_bf16(s, n, bias, sg, ex, cl);
                                         }, sink);
      return;
    }
    case DecPath::kTf32: {
      const int32_t bias = f.bias;
      detail::decode_rows_runs<uint32_t>(v, bi, M, k0, K, transposed, out,
                                         [bias](const uint32_t* s, int64_t n, int32_t* sg, int32_t* ex, uint8_t* cl) {
                                           return decode_tf32(s, n, bias, sg, ex, cl);
                                         }, sink);
      return;
    }
    default: break;
  }
  constexpr int64_t kTile = 16;
  parallel_for(0, (M + kTile - 1) / kTile, grain_for(kTile * K * 4), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t r0 = t * kTile, r1 = std::min(M, r0 + kTile);
      if (!transposed) {
        for (int64_t i = r0; i < r1; ++i) {
          out.decode_row(i, K, f, [&](int64_t k) { return v.at(bi, i, k0 + k); });
          if (sink) (*sink)(i, i + 1, 0, K);
        }
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
      if (sink) (*sink)(r0, r1, 0, K);
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
