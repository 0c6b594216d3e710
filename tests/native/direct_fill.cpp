// The planes filled straight from fp16 / bf16 / tf32 / fp8 codes (fdpa_engine.h DirectFill)
// by an instruction set's own fill against the plain loops (direct_fill(c, Isa::kScalar)),
// without torch: every 8- and 16-bit code and a structured and random set of tf32 words one
// at a time, runs of 1 to 100 codes, and B's panels with partial last panels, rows in order
// and permuted.  The two must agree on which codes need decoding (NaN / infinity, outside the
// window) code by code, and where none does, on every value's bits and exponent byte, with
// nothing written past the end.
// Built by tests/test_cpu_fast_native.py.  argv[1]: "avx2", "avx512" or "neon".  Prints one
// line per code ("ok fp16 ..." or "MISMATCH fp16 ..."), then "N passed, N failed".
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../../csrc/cpu/fdpa_engine.h"

using namespace mma;

namespace {

constexpr float kSentinel = -12345.0f;
constexpr int8_t kSentinelByte = 77;

struct Out {
  std::vector<float> v;
  std::vector<int8_t> e;
  explicit Out(size_t n) : v(n, kSentinel), e(n, kSentinelByte) {}
  bool operator==(const Out& o) const {
    return e == o.e && std::memcmp(v.data(), o.v.data(), v.size() * sizeof(float)) == 0;
  }
};

std::vector<uint32_t> codes_of(PlaneCode c, std::mt19937_64& rng) {
  std::vector<uint32_t> w;
  if (c != PlaneCode::kTf32) {
    for (uint32_t h = 0; h < (plane_code_bytes(c) == 2 ? 65536u : 256u); ++h) w.push_back(h);
    return w;
  }
  // every sign and exponent with edge and random significands, the 13 dropped bits 0, all
  // ones or random; then random words
  for (uint32_t s = 0; s < 2; ++s)
    for (uint32_t ex = 0; ex < 256; ++ex)
      for (uint32_t m : {0u, 1u, 0x200u, 0x3FFu, uint32_t(rng() & 0x3FF), uint32_t(rng() & 0x3FF)})
        for (uint32_t lo : {0u, 0x1FFFu, uint32_t(rng() & 0x1FFF)})
          w.push_back(s << 31 | ex << 23 | m << 13 | lo);
  for (int i = 0; i < 60000; ++i) w.push_back(uint32_t(rng()));
  return w;
}

struct Bytes {  // codes as a tensor holds them (1, 2 or 4 bytes each)
  std::vector<uint8_t> b;
  int size;
  Bytes(const std::vector<uint32_t>& w, int sz) : b(w.size() * size_t(sz)), size(sz) {
    for (size_t i = 0; i < w.size(); ++i) std::memcpy(b.data() + i * size_t(sz), &w[i], size_t(sz));
  }
  const uint8_t* at(size_t i) const { return b.data() + i * size_t(size); }
};

uint32_t nan_code(PlaneCode c) {
  switch (c) {
    case PlaneCode::kFp16: return 0x7E00;
    case PlaneCode::kBf16: return 0xFFC0;
    case PlaneCode::kTf32: return 0x7FC00000;
    case PlaneCode::kE4m3Fn: return 0x7F;
    case PlaneCode::kE5m2: return 0xFE;
    default: return 0x80;  // fnuz
  }
}

// one code set on one fill; returns the number of disagreements (first few printed)
int check(PlaneCode c, const char* cname, const DirectFill& own, const DirectFill& plain) {
  std::mt19937_64 rng(0x5eed + int(c));
  const std::vector<uint32_t> w = codes_of(c, rng);
  const int sz = plane_code_bytes(c);
  const Bytes all(w, sz);
  int bad_n = 0;
  auto fail = [&](const std::string& what) {
    if (bad_n++ < 5) std::printf("  %s: %s\n", cname, what.c_str());
  };
  // code by code: the same verdict, and where it is good the same value and byte
  std::vector<uint32_t> good;
  for (size_t i = 0; i < w.size(); ++i) {
    Out a(2), b(2);
    const uint8_t ba = own.row(all.at(i), 1, a.v.data(), a.e.data());
    const uint8_t bb = plain.row(all.at(i), 1, b.v.data(), b.e.data());
    char buf[96];
    std::snprintf(buf, sizeof buf, "code 0x%08x: needs decoding %d vs %d", w[i], ba != 0, bb != 0);
    if ((ba != 0) != (bb != 0)) fail(buf);
    else if (!ba && !(a == b)) fail(std::string(buf) + ", planes differ");
    else if (a.v[1] != kSentinel || a.e[1] != kSentinelByte) fail(std::string(buf) + ", wrote past n");
    if (!bb) good.push_back(w[i]);
  }
  // runs of 1..100 codes: of every code (the verdict), of the good codes (the planes)
  const std::vector<uint32_t>* sets[] = {&w, &good};
  for (const std::vector<uint32_t>* set : sets) {
    std::vector<uint32_t> s = *set;
    std::shuffle(s.begin(), s.end(), rng);
    const Bytes sb(s, sz);
    for (size_t i = 0, n = 1; i < s.size(); i += n, n = n % 100 + 1) {
      const size_t m = std::min(n, s.size() - i);
      Out a(m + 40), b(m + 40);
      const uint8_t ba = own.row(sb.at(i), int64_t(m), a.v.data(), a.e.data());
      const uint8_t bb = plain.row(sb.at(i), int64_t(m), b.v.data(), b.e.data());
      if ((ba != 0) != (bb != 0) || (!ba && !(a == b)))
        fail("run of " + std::to_string(m) + " at " + std::to_string(i));
      if (set == &good && bb) fail("a run of good codes needs decoding");
    }
  }
  // B's panels: rows [3, 67) of a 70-row B, n columns (partial last panels), rows padded
  // (and with rows permuted, as a multi-pass instruction's pass order puts them)
  std::vector<int32_t> perm(72);
  for (int k = 0; k < 72; ++k) perm[size_t(k)] = k;
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int64_t n : {75, 32, 5, 64})
  for (const int32_t* pos : {static_cast<const int32_t*>(nullptr), static_cast<const int32_t*>(perm.data())}) {
    for (int sprinkle = 0; sprinkle < 2; ++sprinkle) {
      const int64_t K = 70, Kp = 72, sk = n * sz + 6, np = (n + kW - 1) / kW;
      std::vector<uint8_t> B(size_t(K * sk), 0xAB);
      for (int64_t k = 0; k < K; ++k)
        for (int64_t j = 0; j < n; ++j) {
          uint32_t code = good[rng() % good.size()];
          if (sprinkle && k == 40 && j == n - 1) code = nan_code(c);
          std::memcpy(B.data() + k * sk + j * sz, &code, size_t(sz));
        }
      Out a(size_t(np * Kp * kW)), b(size_t(np * Kp * kW));
      const uint8_t ba = own.panels(B.data(), sk, 3, 67, n, Kp * kW, pos, a.v.data(), a.e.data());
      const uint8_t bb = plain.panels(B.data(), sk, 3, 67, n, Kp * kW, pos, b.v.data(), b.e.data());
      if ((ba != 0) != (bb != 0) || (!ba && !(a == b)) || (bb != 0) != (sprinkle != 0))
        fail("panels of " + std::to_string(n) + " columns, sprinkle " + std::to_string(sprinkle) +
             (pos ? ", permuted" : ""));
    }
  }
  std::printf("%s %s fill=%s codes=%zu good=%zu\n", bad_n ? "MISMATCH" : "ok", cname,
              own.row == plain.row ? "plain" : "own", w.size(), good.size());
  return bad_n;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string name = argc > 1 ? argv[1] : "";
  const Isa isa = name == "avx512" ? Isa::kAvx512 : name == "avx2" ? Isa::kAvx2 : name == "neon" ? Isa::kNeon : Isa::kScalar;
  if (isa == Isa::kScalar || !isa_has_kernels(isa)) {
    std::printf("no kernels for '%s'\n", name.c_str());
    return 2;
  }
  int passed = 0, failed = 0;
  const char* names[kNumPlaneCodes] = {"fp16", "bf16", "tf32", "e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz"};
  PlaneCode codes[kNumPlaneCodes];
  for (int i = 0; i < kNumPlaneCodes; ++i) codes[i] = PlaneCode(i);
  for (int i = 0; i < kNumPlaneCodes; ++i) {
    const DirectFill own = direct_fill(codes[i], isa), plain = direct_fill(codes[i], Isa::kScalar);
    (check(codes[i], names[i], own, plain) ? failed : passed)++;
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
