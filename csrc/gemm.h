// Host-side declarations shared by the op registration and the device kernels.
#pragma once
#include "core/params.h"
#include "torch_stable.h"

namespace mma {

// Byte-addressed 3-D view of a tensor of 1/2/4/8-byte codes with arbitrary strides
// (passed by value to the CUDA kernels too).
struct View3 {
  const uint8_t* base;
  int64_t s0, s1, s2;  // strides in bytes
  int esize;
  MMA_HD uint64_t at(int64_t b, int64_t i, int64_t j) const {
    const uint8_t* p = base + b * s0 + i * s1 + j * s2;
    switch (esize) {
      case 1: return *p;
      case 2: return *reinterpret_cast<const uint16_t*>(p);
      case 4: return *reinterpret_cast<const uint32_t*>(p);
      default: return *reinterpret_cast<const uint64_t*>(p);
    }
  }
};

inline View3 view3(const Tensor& t) {
  const int64_t es = int64_t(t.element_size());
  return View3{static_cast<const uint8_t*>(t.data_ptr()), t.stride(0) * es, t.stride(1) * es,
               t.stride(2) * es, int(es)};
}

// Scales of the block-scaled ops (ST-/GST-FDPA): both or none, shapes (batch, M, nblk) and
// (batch, nblk, N) with nblk = ceil(K / block), 1-byte codes; none for other ops.
void check_scales(const char* op, const Tensor& a, const Tensor& b, const OptTensor& sa,
                  const OptTensor& sb, const Params& P);

// Validated entry points (checks in ops.cpp).
Tensor gemm_cpu(const Tensor& a, const Tensor& b, const Tensor& c, const OptTensor& sa,
                const OptTensor& sb, const Params& P);
Tensor gemm_cuda(const Tensor& a, const Tensor& b, const Tensor& c, const OptTensor& sa,
                 const OptTensor& sb, const Params& P);

// For tests and benchmarks: the CPU kernel's path for this parameter vector
// (cpu/fast_dispatch.cpp).
std::string cpu_fast_path(const IntList& params);

Params checked_params(const Tensor& a, const Tensor& b, const Tensor& c, const OptTensor& sa,
                      const OptTensor& sb, const IntList& params);

}  // namespace mma
