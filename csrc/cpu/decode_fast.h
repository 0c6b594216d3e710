// Fast decoders for decode_rows (decoded.h): runs of codes -> (sig, exp, cls) with the bits of
// core/decode.h's decode().  The four fp8 formats (e4m3fn, e5m2 and their fnuz forms), fp16,
// bf16 and tf32 / xf32 (fp32 words) go through a branch-free decode specialised at compile
// time (vectorised, AVX2 clone on x86); other codes in 1-byte elements (fp6, fp4, scales)
// through a 256-entry table made by decode() itself.  Every other format / element size:
// decode() per code.
// No torch here.
#pragma once
#include <cstdint>

#include "../core/decode.h"

namespace mma {

enum class DecPath : int { kGeneric = 0, kLut8, kFp16, kBf16, kTf32, kE4m3Fn, kE5m2, kE4m3Fnuz, kE5m2Fnuz };

// which decoder serves codes of format f held in esize-byte elements
DecPath dec_path(const FormatDesc& f, int esize);

// decode(f, c) for every byte c (format f)
struct DecLut {
  int32_t sig[256], exp[256];
  uint8_t cls[256];
};
// the calling thread's table for f (made on first use, a few formats kept)
const DecLut& dec_lut(const FormatDesc& f);

// n codes -> sig / exp / cls; returns the OR of the classes (kInf | kNan seen)
uint8_t decode_lut8(const DecLut& t, const uint8_t* src, int64_t n, int32_t* sig, int32_t* exp,
                    uint8_t* cls);
uint8_t decode_fp16(const uint16_t* src, int64_t n, int32_t bias, int32_t* sig, int32_t* exp,
                    uint8_t* cls);
uint8_t decode_bf16(const uint16_t* src, int64_t n, int32_t bias, int32_t* sig, int32_t* exp,
                    uint8_t* cls);
// fp8 codes of the formats of the paths kE4m3Fn .. kE5m2Fnuz
uint8_t decode_fp8(DecPath path, const uint8_t* src, int64_t n, int32_t bias, int32_t* sig,
                   int32_t* exp, uint8_t* cls);
// tf32 / xf32 in fp32 words (the low 13 bits dropped, as decode() does)
uint8_t decode_tf32(const uint32_t* src, int64_t n, int32_t bias, int32_t* sig, int32_t* exp,
                    uint8_t* cls);

}  // namespace mma
