// A function compiled for AVX-512 (x86-64-v4, GCC 12 on), AVX2 and baseline x86-64, the loader
// picking one by the CPU (GCC's target_clones): the plain loops the compiler vectorises
// (decoders, plane runs, fp16 runs, the core's lanes).  Nothing elsewhere.  The AVX-512 copy
// halved the generic direct fill of A's fp16 rows (perf of sm86 fp16 -> fp16 at 1024^3: 1.3% ->
// 0.7%); AVX-512 CPUs now fill fp16 / bf16 / tf32 / e4m3fn / e5m2 planes with kern_avx512.cpp's
// own code instead (FdpaKernels::direct).
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#define MMA_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#elif defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MMA_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define MMA_SIMD_CLONES
#endif
