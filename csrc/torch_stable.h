// The part of torch's stable ABI the entry points use (torch/csrc/stable, torch/headeronly):
// compiled with TORCH_TARGET_VERSION = 2.11 (setup.py), one build serves every torch from
// 2.11 on (docs/install.md).  Nothing here includes ATen or c10.
#pragma once
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include <cstdint>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace mma {

using Tensor = torch::stable::Tensor;
using OptTensor = std::optional<torch::stable::Tensor>;
using IntList = std::vector<int64_t>;  // a schema's int[]
using torch::headeronly::ScalarType;
using torch::stable::Device;

// An argument error: std::invalid_argument, which torch's Python binding of an op raises as
// ValueError (as TORCH_CHECK_VALUE did before the port; tests/test_stable_abi.py checks it).
// Ctrl-C inside a call: torch_mma_emu/cpp.py (call) raises KeyboardInterrupt for this text
// (a stable kernel can only throw a C++ exception, which Python sees as RuntimeError).
inline constexpr char kInterruptTag[] = "[mma_emu KeyboardInterrupt]";

template <class... Args>
[[noreturn]] void value_error(const Args&... args) {
  std::ostringstream s;
  (s << ... << args);
  throw std::invalid_argument(s.str());
}

#define MMA_CHECK_VALUE(cond, ...)                          \
  do {                                                      \
    if (!(cond)) ::mma::value_error(__VA_ARGS__);           \
  } while (0)

// The kernels' parallel loops, run on the calling thread: what at::parallel_for did in every
// build before the port (setup.py never passed -fopenmp, so ATen's header-only OpenMP path
// compiled to f(begin, end)).  The loop bodies are ready for torch's pool (they reach the
// caller's thread_local work buffers through references: cpu/fast_fdpa.cpp,
// cpu/fast_values.cpp); `using torch::stable::parallel_for;` here makes them parallel, once
// its speed and the suite's time are measured on a quiet machine (docs/install.md).
template <class F>
inline void parallel_for(int64_t begin, int64_t end, int64_t /*grain*/, const F& f) {
  if (begin < end) f(begin, end);
}

// "[2, 3, 4]", as at::IntArrayRef printed in the messages before the port.
inline std::string shape_of(const Tensor& t) {
  std::ostringstream s;
  s << '[';
  for (int64_t d = 0; d < t.dim(); ++d) s << (d ? ", " : "") << t.size(d);
  s << ']';
  return s.str();
}

// "cpu", "cuda:0" (c10::Device's spelling).
inline std::string device_name(const Device& d) {
  std::ostringstream s;
  if (d.is_cpu()) s << "cpu";
  else if (d.is_cuda()) s << "cuda";
  else s << "device type " << int(d.type());
  if (!d.is_cpu() && d.has_index()) s << ':' << int(d.index());
  return s.str();
}

inline bool same_device(const Tensor& x, const Tensor& y) { return x.device() == y.device(); }

// An int64 CPU tensor holding v (the schedule program for the kernels).
inline Tensor long_tensor(const IntList& v) {
  Tensor t = torch::stable::empty({int64_t(v.size())}, ScalarType::Long, std::nullopt,
                                  Device(torch::headeronly::DeviceType::CPU));
  int64_t* p = t.mutable_data_ptr<int64_t>();
  for (size_t i = 0; i < v.size(); ++i) p[i] = v[i];
  return t;
}

}  // namespace mma
