// A 640-bit two's complement fixed-point accumulator (lsb weight 2^-320) for exact sums of
// a few products and c, as E-FDPA needs (bf16 products span 2^-266 .. 2^256).
#pragma once
#include "round.h"

namespace mma {

struct WideAcc {
  static constexpr int kLimbs = 10;
  static constexpr int32_t kBase = -320;
  uint64_t w[kLimbs];

  MMA_HD WideAcc() {
    for (int i = 0; i < kLimbs; ++i) w[i] = 0;
  }

  // Add sig * 2^exp2 exactly (|sig| < 2^62, exp2 >= kBase, result range checked by Spec).
  MMA_HD void add(int64_t sig, int32_t exp2) {
    if (sig == 0) return;
    const bool neg = sig < 0;
    const uint64_t m = neg ? uint64_t(-sig) : uint64_t(sig);
    const int32_t pos = exp2 - kBase;
    const int li = pos >> 6, off = pos & 63;
    uint64_t part[3] = {m << off, off ? (m >> (64 - off)) : 0, 0};
    if (neg) {  // subtract: add the two's complement of the shifted magnitude
      uint64_t borrow = 0;
      for (int i = li; i < kLimbs; ++i) {
        const uint64_t sub = (i - li) < 3 ? part[i - li] : 0;
        const uint64_t t = w[i] - sub;
        const uint64_t b1 = w[i] < sub;
        w[i] = t - borrow;
        borrow = b1 | (t < borrow);
        if (!borrow && (i - li) >= 2) break;
      }
    } else {
      uint64_t carry = 0;
      for (int i = li; i < kLimbs; ++i) {
        const uint64_t addv = (i - li) < 3 ? part[i - li] : 0;
        const uint64_t t = w[i] + addv;
        const uint64_t c1 = t < addv;
        w[i] = t + carry;
        carry = c1 | (w[i] < carry);
        if (!carry && (i - li) >= 2) break;
      }
    }
  }

  // Round the exact content to the target; an exact zero gives +0.
  MMA_HD uint64_t round(const OutFmt& o) const {
    uint64_t v[kLimbs];
    const int neg = int(w[kLimbs - 1] >> 63);
    uint64_t carry = 1;
    for (int i = 0; i < kLimbs; ++i) {
      if (neg) {
        const uint64_t t = ~w[i] + carry;
        carry = (carry && t == 0) ? 1 : 0;
        v[i] = t;
      } else {
        v[i] = w[i];
      }
    }
    int top = kLimbs - 1;
    while (top >= 0 && v[top] == 0) --top;
    if (top < 0) return 0;
    const int nb = bitlen64(v[top]);
    const int32_t msb = top * 64 + nb - 1;  // bit index of the leading one
    // take the 63 bits from msb downwards as the magnitude, the rest as sticky
    const int32_t lo = msb - 62;
    uint64_t mag = 0;
    for (int32_t bit = msb; bit >= 0 && bit >= lo; --bit)
      mag = (mag << 1) | ((v[bit >> 6] >> (bit & 63)) & 1);
    bool sticky = false;
    if (lo > 0) {
      const int li = lo >> 6, off = lo & 63;
      sticky = off && (v[li] & ((uint64_t(1) << off) - 1));
      for (int i = 0; i < li && !sticky; ++i) sticky = v[i] != 0;
    }
    const int32_t exp2 = (lo > 0 ? lo : 0) + kBase;
    return round_pack(neg, mag, exp2, o, o.mode, sticky);
  }
};

}  // namespace mma
