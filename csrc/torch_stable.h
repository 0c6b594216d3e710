// The part of torch's stable ABI the entry points use (torch/csrc/stable, torch/headeronly):
// compiled with TORCH_TARGET_VERSION = 2.11 (setup.py), one build serves every torch from
// 2.11 on (docs/install.md).  Nothing here includes ATen or c10.
#pragma once
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <mutex>
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

// The kernels' parallel loops, on torch's own intra-op pool (torch::stable::parallel_for,
// stable from torch 2.10: at::parallel_for behind the shim), so torch.set_num_threads /
// get_num_threads govern them and no second pool competes with torch's.  [begin, end) runs on
// the calling thread when it is no longer than grain, or with one thread (and, as in
// at::parallel_for, inline inside another parallel region).  Else min(threads, n / grain)
// pool threads take pieces of >= grain items from a shared counter, about 8 pieces a thread:
// on cores shared with other work a descheduled thread holds up one piece, not a fixed share.
// Every loop body writes disjoint outputs with the same per-output operations whatever the
// pieces are, so the bits never depend on the thread count (tests/test_cpu_threads.py).  An
// exception in a body (on any thread) is rethrown here as itself (the shim alone would turn
// it into a RuntimeError without its message); the other threads stop taking pieces.
template <class F>
inline void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  if (begin >= end) return;
  const int64_t n = end - begin;
  grain = std::max<int64_t>(1, grain);
  const int64_t nt = n <= grain ? 1
                                : std::min<int64_t>(int64_t(torch::stable::get_num_threads()),
                                                    (n + grain - 1) / grain);
  if (nt <= 1) {
    f(begin, end);
    return;
  }
  const int64_t piece = std::max(grain, n / (nt * 8));
  std::atomic<int64_t> next{begin};
  std::exception_ptr err;
  std::mutex mu;
  torch::stable::parallel_for(0, nt, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)  // one per pool thread (all of them when nested: inline)
      for (int64_t lo; (lo = next.fetch_add(piece)) < end;) {
        try {
          f(lo, std::min(end, lo + piece));
        } catch (...) {
          std::lock_guard<std::mutex> lock(mu);
          if (!err) err = std::current_exception();
          next.store(end);
        }
      }
  });
  if (err) std::rethrow_exception(err);
}

// Grains: a piece gets at least task_work() multiply-adds, 2^19 (roughly 0.1 ms of emulation),
// so a 64 x 64 x 64 product (2^18) never pays for waking threads, while any shape with more
// work than that (tall-skinny, short-wide, batched, GEMV) splits.  MMA_EMU_CPU_TASK_WORK
// overrides it (read per call: tests split tiny products with 1).
inline int64_t task_work() {
  const char* s = std::getenv("MMA_EMU_CPU_TASK_WORK");
  const long long v = s ? std::atoll(s) : 0;
  return v > 0 ? int64_t(v) : int64_t(1) << 19;
}
inline int64_t grain_for(int64_t work_per_item) {
  return std::max<int64_t>(1, task_work() / std::max<int64_t>(1, work_per_item));
}
inline int64_t num_threads() { return int64_t(torch::stable::get_num_threads()); }

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
