// Host check of csrc/cuda/fast_tfdpa.h: the CUDA kernel's register T-FDPA chunk against the
// core's fused_op on random chunks.  Built with the host compiler by
// tests/test_gpu_fastpath_host.py (no CUDA needed).  Reads lines
//     count seed p[0] ... p[kNumParams - 1]   (the cpp.params(spec) vector, layout.h order)
// and prints "checked mismatches" per line, then the first mismatches in detail.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "fast_tfdpa.h"

using namespace mma;

namespace {

struct Gen {
  std::mt19937_64 rng;
  explicit Gen(uint64_t seed) : rng(seed) {}
  uint64_t bits(int n) { return n >= 64 ? rng() : (rng() & ((uint64_t(1) << n) - 1)); }
  int uni(int lo, int hi) { return lo + int(rng() % uint64_t(hi - lo + 1)); }
};

int width(const FormatDesc& f) { return f.container == 32 ? 32 : f.ebits + f.mbits + 1; }

// A random code of f in one of several families; non-finite codes become +0 (code 0).
uint64_t element(const FormatDesc& f, Gen& g, int family, int center, int neg_bias) {
  uint64_t code;
  const int man_shift = f.container == 32 ? 13 : 0;  // tf32: the fp32 word keeps 10 bits
  const uint64_t emask = (uint64_t(1) << f.ebits) - 1;
  uint64_t e, m, s;
  switch (family) {
    case 0:  // uniform codes
      code = g.bits(width(f));
      break;
    case 1:  // the largest exponents, random mantissas and signs
      e = emask - uint64_t(g.uni(0, 2));
      m = g.bits(f.mbits);
      s = g.bits(1);
      code = (((s << f.ebits) | e) << f.mbits | m) << man_shift | (f.container == 32 ? g.bits(13) : 0);
      break;
    case 2:  // all-ones mantissa near the top exponent, one sign: the largest possible sum
      e = emask - 1;
      m = (uint64_t(1) << f.mbits) - 1;
      s = uint64_t(neg_bias);
      code = (((s << f.ebits) | e) << f.mbits | m) << man_shift;
      break;
    default: {  // exponents in a window around center: alignment shifts of every size
      const int eb = center + g.uni(-6, 6);
      e = uint64_t(eb < 0 ? 0 : (eb > int(emask) ? int(emask) : eb));
      m = g.bits(f.mbits);
      s = g.bits(1);
      code = (((s << f.ebits) | e) << f.mbits | m) << man_shift;
    }
  }
  if (decode(f, code).cls != kFinite) code = 0;
  return code;
}

template <int L, bool W>
uint64_t run_fast(const Params& P, const OutFmt& o, const std::vector<Dec>& a,
                  const std::vector<Dec>& b, int n, int G, uint64_t c) {
  int32_t asg[L], ae[L], bs[L], be[L];
  for (int k = 0; k < L; ++k) {
    const bool in = k < n;
    asg[k] = in ? a[size_t(k)].sig * (int32_t(1) << G) : 0;
    ae[k] = in ? a[size_t(k)].exp : kZeroExp;
    bs[k] = in ? b[size_t(k)].sig : 0;
    be[k] = in ? b[size_t(k)].exp : kZeroExp;
  }
  return fast_tfdpa_chunk<L, W>(P, o, asg, ae, bs, be, c);
}

uint64_t dispatch(const Params& P, const FastTfdpa& f, const OutFmt& o, const std::vector<Dec>& a,
                  const std::vector<Dec>& b, int n, uint64_t c) {
#define MMA_CASE(LL)                                                             \
  case LL:                                                                       \
    return f.wide ? run_fast<LL, true>(P, o, a, b, n, f.G, c)                    \
                  : run_fast<LL, false>(P, o, a, b, n, f.G, c);
  switch (P.L) {
    MMA_CASE(4)
    MMA_CASE(8)
    MMA_CASE(16)
    MMA_CASE(32)
  }
#undef MMA_CASE
  std::abort();
}

}  // namespace

int main() {
  std::string line;
  int shown = 0;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    std::istringstream in(line);
    long long count = 0, seed = 0;
    in >> count >> seed;
    std::vector<int64_t> pv;
    int64_t x;
    while (in >> x) pv.push_back(x);
    if (pv.size() != size_t(kNumParams)) {
      std::printf("error: expected %d params, got %zu\n", kNumParams, pv.size());
      return 2;
    }
    const Params P = parse_params(pv.data());
    const FastTfdpa f = fast_tfdpa_plan(P);
    if (!f.ok) {
      std::printf("skip 0\n");
      continue;
    }
    const OutFmt o = out_fmt(P.rho);
    Gen g{uint64_t(seed)};
    long long bad = 0;
    std::vector<int32_t> sa(size_t(P.L)), ea(size_t(P.L)), sb(size_t(P.L)), eb(size_t(P.L));
    std::vector<uint8_t> ca(size_t(P.L), 0), cb(size_t(P.L), 0);
    std::vector<Dec> da(size_t(P.L)), db(size_t(P.L));
    const int top_a = (1 << P.fa.ebits) - 1, top_b = (1 << P.fb.ebits) - 1;
    for (long long it = 0; it < count; ++it) {
      const int fam = int(it % 4);
      const int n = g.uni(0, 4) == 0 ? g.uni(1, P.L) : P.L;
      const int center_a = g.uni(0, top_a), center_b = g.uni(0, top_b);
      const int neg = int(g.bits(1));
      for (int k = 0; k < P.L; ++k) {
        da[size_t(k)] = decode(P.fa, element(P.fa, g, fam, center_a, neg));
        db[size_t(k)] = decode(P.fb, element(P.fb, g, fam, center_b, 0));
        sa[size_t(k)] = da[size_t(k)].sig; ea[size_t(k)] = da[size_t(k)].exp;
        sb[size_t(k)] = db[size_t(k)].sig; eb[size_t(k)] = db[size_t(k)].exp;
      }
      // c: a random output code (specials included), or a value near the product scale
      uint64_t c = g.bits(P.fo.ebits + P.fo.mbits + 1);
      if (g.uni(0, 3) == 0) c = 0;
      const Chunk ch{Operand{sa.data(), ea.data(), ca.data()}, Operand{sb.data(), eb.data(), cb.data()},
                     n, 0, nullptr, nullptr};
      const uint64_t want = fused_op(P, o, ch, c, false);
      const uint64_t got = dispatch(P, f, o, da, db, n, c);
      if (want != got) {
        ++bad;
        if (shown < 10) {
          ++shown;
          std::fprintf(stderr, "mismatch L=%d F=%d n=%d c=%#llx: core %#llx fast %#llx\n", P.L, P.F, n,
                       (unsigned long long)c, (unsigned long long)want, (unsigned long long)got);
        }
      }
    }
    std::printf("%lld %lld\n", count, bad);
  }
  return 0;
}
