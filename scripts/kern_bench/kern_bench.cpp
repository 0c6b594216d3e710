// Microbenchmark of the FDPA vector kernels without torch: one row's engine (fdpa_engine.h)
// over M x N x K random normal-range operands, ns per 16 multiply-adds, best of reps.  The
// FMA / FTZ-AddMul rows run their ValuesEngine (values_engine.h) the same way; isa
// "avx512w" forces the 512-bit value kernels (avx512 takes the CPU's choice).
// stdin: "name p0 ... p44" lines (cpp.params(spec)); argv: isa M N K reps.
// Built and run by scripts/kern_bench/run.py (g++ -O3, the flags of setup.py's default build).
#include <chrono>
#include <ctime>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../../csrc/cpu/fdpa_engine.h"
#include "../../csrc/cpu/fpenv.h"
#include "../../csrc/cpu/values_engine.h"

using namespace mma;

static double thread_seconds() {  // thread CPU time: steadier than wall time on a shared machine
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// One row's line: ns per 16 multiply-adds, MAC/s, the kernel kind ("fixed" / "generic" for the
// FDPA rows: the one compiled for the row's shape ran, or not; MMA_EMU_CPU_GENERIC=1: never;
// "-" for the value kernels) and the outputs' hash
static void report(const std::string& name, const std::string& isa_s, double best, int64_t M, int64_t N,
                   int64_t K, const char* shape, uint32_t h) {
  std::printf("%-44s %s  %.3f ns/16MAC  %.3g MAC/s  %s  hash %08x\n", name.c_str(), isa_s.c_str(),
              best * 1e9 * 16 / double(M * N * K), double(M * N * K) / best, shape, h);
}

// The FMA / FTZ-AddMul kernels over row blocks of 24 (fast_values.cpp's task), one K block.
template <class T>
static void bench_values(const std::string& name, const std::string& isa_s, const Params& P,
                         Isa isa, bool wide, int64_t M, int64_t N, int64_t K, int reps) {
  ValuesEngine<T> eng;
  if (!eng.setup(P, isa)) {
    std::printf("%-40s no kernel\n", name.c_str());
    return;
  }
  if (wide) {
    eng.ks = value_kernels_avx512_wide();
    eng.W = sizeof(T) == 8 ? eng.ks.wd : eng.ks.wf;
  }
  std::mt19937_64 rng(7);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<T> a(size_t(M * K)), b(size_t(K * N));
  for (auto& x : a) x = T(nd(rng));
  for (auto& x : b) x = T(nd(rng));
  FpEnvGuard env;
  eng.pack(P, a.data(), K, 1, b.data(), N, 1, M, N, 0, K, serial_for);
  std::vector<T> acc(size_t(M * eng.Np));
  double best = 1e30;
  uint32_t h = 0;
  for (int r = 0; r < reps; ++r) {
    std::fill(acc.begin(), acc.end(), T(0));
    const double t0 = thread_seconds();
    for (int64_t i0 = 0; i0 < M; i0 += 24) eng.run(i0, std::min<int64_t>(24, M - i0), 0, eng.Kp, acc.data() + i0 * eng.Np, eng.Np);
    best = std::min(best, thread_seconds() - t0);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        uint64_t w = 0;
        std::memcpy(&w, &acc[size_t(i * eng.Np + j)], sizeof(T));
        h = h * 31 + uint32_t(w ^ (w >> 32));
      }
  }
  report(name, isa_s, best, M, N, K, "-", h);
}

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: kern_bench isa M N K reps < rows\n");
    return 2;
  }
  const std::string isa_s = argv[1];
  const bool wide = isa_s == "avx512w";
  const Isa isa = isa_s == "avx2" ? Isa::kAvx2 : (isa_s == "avx512" || wide) ? Isa::kAvx512
                  : isa_s == "neon" ? Isa::kNeon : Isa::kScalar;
  const int64_t M = std::stoll(argv[2]), N = std::stoll(argv[3]), K = std::stoll(argv[4]);
  const int reps = std::stoi(argv[5]);
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string name;
    in >> name;
    std::vector<int64_t> v;
    int64_t x;
    while (in >> x) v.push_back(x);
    if (v.size() != size_t(kNumParams)) continue;
    Params P = parse_params(v.data());
    P.epilogue = 0;
    const FastKind kind = fast_eligible(P);
    if (kind == FastKind::kFma || kind == FastKind::kFtz) {
      if (P.rho == kRneFp64) bench_values<double>(name, isa_s, P, isa, wide, M, N, K, reps);
      else bench_values<float>(name, isa_s, P, isa, wide, M, N, K, reps);
      continue;
    }
    FdpaEngine eng;
    if (!eng.setup(P, isa)) {
      std::printf("%-40s no kernel\n", name.c_str());
      continue;
    }
    std::mt19937_64 rng(7);
    std::normal_distribution<double> nd(0.0, 1.0);
    auto enc = [&](const FormatDesc& f) -> uint64_t {  // nearest code by search on a few tries
      for (;;) {
        const uint64_t c = rng() & ((f.container == 32 ? 0xFFFFFFFFull : (1ull << (f.ebits + f.mbits + (f.is_signed ? 1 : 0))) - 1));
        const Dec d = decode(f, c);
        if (d.cls != kFinite) continue;
        // values like randn's: magnitudes in [2^-6, 4) (or zero)
        if (d.sig != 0) {
          const double m = std::ldexp(double(std::abs(d.sig)), d.exp - f.mbits);
          if (f.ebits > 2 && (m >= 4 || m < 1.0 / 64)) continue;
        }
        return c;
      }
    };
    const bool scaled = P.op == kStFdpa || P.op == kGstFdpa;
    const int64_t nblk = scaled ? (K + P.block - 1) / P.block : 0;
    Decoded A, B;
    A.resize(M, K);
    B.resize(N, K);
    std::vector<uint64_t> a(size_t(M * K)), b(size_t(N * K));
    for (auto& c : a) c = enc(P.fa);
    for (auto& c : b) c = enc(P.fb);
    for (int64_t i = 0; i < M; ++i) A.decode_row(i, K, P.fa, [&](int64_t k) { return a[size_t(i * K + k)]; });
    for (int64_t j = 0; j < N; ++j) B.decode_row(j, K, P.fb, [&](int64_t k) { return b[size_t(j * K + k)]; });
    std::vector<Dec> SA(size_t(M * nblk)), SB(size_t(N * nblk));
    for (auto& s : SA) s = decode(P.fs, uint64_t(P.fs.bias));
    for (auto& s : SB) s = decode(P.fs, uint64_t(P.fs.bias));
    std::vector<uint8_t> fsa(size_t(M), 0), fsb(size_t(N), 0);
    eng.build(A, B, scaled ? SA.data() : nullptr, scaled ? SB.data() : nullptr, fsa.data(),
              fsb.data(), nblk, M, N, K, serial_for);
    const int64_t W = eng.width();
    std::vector<uint32_t> acc(size_t(M * W), 0);
    double best = 1e30;
    uint32_t h = 0;
    for (int r = 0; r < reps; ++r) {
      std::fill(acc.begin(), acc.end(), 0u);
      const double t0 = thread_seconds();
      for (int64_t i0 = 0; i0 < M; i0 += 16) eng.run(i0, std::min(M, i0 + 16), 0, K, acc.data() + i0 * W, W);
      best = std::min(best, thread_seconds() - t0);
      for (auto w : acc) h = h * 31 + w;
    }
    report(name, isa_s, best, M, N, K, eng.fixed_shape() ? "fixed" : "generic", h);
  }
  return 0;
}
