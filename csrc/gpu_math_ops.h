// Argument checks shared by the CPU and CUDA kernels of mma_emu::_gpu_math (schemas: ops.cpp;
// kernels: cpu/gpu_math_cpu.cpp, cuda/gpu_math_cuda.cu; the arithmetic: core/gpu_math.h).
#pragma once
#include <string>

#include "core/gpu_math.h"
#include "torch_stable.h"

namespace mma {

inline constexpr int64_t kGmTableWords = 3 * (64 + 128 + 128) + 3;   // EX2, RCP, RSQ; biases

// The function's code; unknown names are a ValueError listing the known ones.
inline int gm_code(const std::string& op) {
  const int code = gm::op_code(op.c_str());
  if (code < 0) {
    std::string known;
    for (int i = 0; i < gm::kNumOps; ++i) known += std::string(i ? ", " : "") + gm::kOpNames[i];
    value_error("_gpu_math: unknown function '", op, "'; known: ", known);
  }
  return code;
}

inline void check_tables(const Tensor& tables) {
  MMA_CHECK_VALUE(tables.scalar_type() == ScalarType::Long && tables.is_contiguous() &&
                      tables.numel() == kGmTableWords,
                  "_gpu_math: tables must be a contiguous int64 tensor of ", kGmTableWords,
                  " words (torch_mma_emu/gpu_math/fast.py builds it)");
}

// The tables as the models read them: the rows at `rows` (on the kernel's device), the biases
// from `host` (the same words on the CPU).
inline gm::MufuTables mufu_tables(const int64_t* rows, const int64_t* host) {
  return gm::MufuTables{rows, rows + 3 * 64, rows + 3 * 192,
                        uint64_t(host[kGmTableWords - 3]), uint64_t(host[kGmTableWords - 2]),
                        uint64_t(host[kGmTableWords - 1])};
}

}  // namespace mma
