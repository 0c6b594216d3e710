// A function compiled twice, for AVX2 and for baseline x86-64, the loader picking one by the
// CPU (GCC's target_clones): the plain loops the compiler vectorises (decoders, plane runs,
// fp16 runs, the core's lanes).  Nothing elsewhere.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MMA_AVX2_CLONE __attribute__((target_clones("avx2", "default")))
#else
#define MMA_AVX2_CLONE
#endif
