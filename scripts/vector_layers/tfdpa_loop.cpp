// The T-FDPA kernel's inner loop (exact fp32 products times 2^(F - emax), truncated to int32,
// summed) written with three vector layers, for docs/cpu_fast.md "Which vector layer":
//   LAYER=repo  csrc/cpu/simd (this project's layer)      LAYER=aten  at::vec::Vectorized
//   LAYER=hwy   Google Highway (static target)
// run.sh compiles it per layer and ISA and prints ns per 32-column chunk step.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#if LAYER_REPO
#include "../../csrc/cpu/simd/avx2.h"
#include "../../csrc/cpu/simd/avx512.h"
#elif LAYER_ATEN
#include <ATen/cpu/vec/vec.h>
#elif LAYER_HWY
#include <hwy/highway.h>
#endif

constexpr int kW = 32, L = 16;

#if LAYER_REPO
#if ISA512
using V = mma::simd::Avx512;
#define KT MMA_KT512
#else
using V = mma::simd::Avx2;
#define KT MMA_KT
#endif
KT void chunk(const float* av, const float* bv, const float* scale, int32_t* out, int64_t n) {
  constexpr int R = kW / V::kN;
  for (int64_t c = 0; c < n; ++c) {
    typename V::I T[R];
    typename V::F s[R];
    for (int v = 0; v < R; ++v) { T[v] = V::zero(); s[v] = V::loadu_f(scale + v * V::kN); }
    for (int k = 0; k < L; ++k) {
      const typename V::F a = V::bcast(av + (c * L + k) % 4096);
      for (int v = 0; v < R; ++v)
        T[v] = V::add(T[v], V::cvtt(V::mul(V::mul(a, V::load(bv + k * kW + v * V::kN)), s[v])));
      for (int v = 0; v < R; ++v) V::pin(T[v]);
    }
    for (int v = 0; v < R; ++v) V::storeu(out + v * V::kN, V::add(V::loadu(out + v * V::kN), T[v]));
  }
}
#elif LAYER_ATEN
using Vf = at::vec::Vectorized<float>;
using Vi = at::vec::Vectorized<int32_t>;
void chunk(const float* av, const float* bv, const float* scale, int32_t* out, int64_t n) {
  constexpr int N = Vf::size(), R = kW / N;
  for (int64_t c = 0; c < n; ++c) {
    Vi T[R];
    Vf s[R];
    for (int v = 0; v < R; ++v) { T[v] = Vi(0); s[v] = Vf::loadu(scale + v * N); }
    for (int k = 0; k < L; ++k) {
      const Vf a(av[(c * L + k) % 4096]);
      for (int v = 0; v < R; ++v)
        T[v] = T[v] + at::vec::convert<int32_t>(a * Vf::loadu(bv + k * kW + v * N) * s[v]);
    }
    for (int v = 0; v < R; ++v) (Vi::loadu(out + v * N) + T[v]).store(out + v * N);
  }
}
#elif LAYER_HWY
namespace hn = hwy::HWY_NAMESPACE;
void chunk(const float* av, const float* bv, const float* scale, int32_t* out, int64_t n) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  constexpr int N = int(hn::MaxLanes(decltype(df)())), R = kW / N;
  for (int64_t c = 0; c < n; ++c) {
    decltype(hn::Zero(di)) T[R];
    decltype(hn::Zero(df)) s[R];
    for (int v = 0; v < R; ++v) { T[v] = hn::Zero(di); s[v] = hn::LoadU(df, scale + v * N); }
    for (int k = 0; k < L; ++k) {
      const auto a = hn::Set(df, av[(c * L + k) % 4096]);
      for (int v = 0; v < R; ++v)
        T[v] = hn::Add(T[v], hn::ConvertTo(di, hn::Mul(hn::Mul(a, hn::LoadU(df, bv + k * kW + v * N)), s[v])));
    }
    for (int v = 0; v < R; ++v) hn::StoreU(hn::Add(hn::LoadU(di, out + v * N), T[v]), di, out + v * N);
  }
}
#endif

int main() {
  std::vector<float> av(4096 + L), bv(L * kW), sc(kW);
  for (size_t i = 0; i < av.size(); ++i) av[i] = float(int(i % 97) - 48);
  for (size_t i = 0; i < bv.size(); ++i) bv[i] = float(int(i % 31) - 15) * 0.25f;
  for (int i = 0; i < kW; ++i) sc[i] = 1024.0f;
  std::vector<int32_t> out(kW, 0);
  const int64_t n = 2000000;
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    chunk(av.data(), bv.data(), sc.data(), out.data(), n);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = dt < best ? dt : best;
  }
  int64_t h = 0;
  for (int i = 0; i < kW; ++i) h = h * 31 + out[i];
  std::printf("%.3f ns per chunk (%d products x %d columns), checksum %lld\n", best / n * 1e9, L,
              kW, (long long)h);
}
