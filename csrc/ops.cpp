// Registration of the C++ op mma_emu::_gemm (schema, argument checks, CPU kernel).
// The public op mma_emu::emulated_mm (torch_mma_emu/ops.py) resolves the arch to a Spec and
// calls this one with the flat parameter vector.
#include <torch/library.h>

#include "gemm.h"

namespace mma {

void check_scales(const char* op, const at::Tensor& a, const at::Tensor& b,
                  const c10::optional<at::Tensor>& sa, const c10::optional<at::Tensor>& sb,
                  const Params& P) {
  TORCH_CHECK_VALUE(sa.has_value() == sb.has_value(), op, ": give both scales or none");
  if (P.op == kStFdpa || P.op == kGstFdpa) {
    TORCH_CHECK_VALUE(sa.has_value(), op, ": block-scaled op needs scales");
    TORCH_CHECK_VALUE(P.block > 0, op, ": block size must be positive");
    const int64_t nblk = (a.size(2) + P.block - 1) / P.block;
    TORCH_CHECK_VALUE(sa->dim() == 3 && sa->size(0) == a.size(0) && sa->size(1) == a.size(1) &&
                          sa->size(2) == nblk,
                      op, ": scale_a must have shape (batch, M, ceil(K / block))");
    TORCH_CHECK_VALUE(sb->dim() == 3 && sb->size(0) == b.size(0) && sb->size(1) == nblk &&
                          sb->size(2) == b.size(2),
                      op, ": scale_b must have shape (batch, ceil(K / block), N)");
    TORCH_CHECK_VALUE(sa->element_size() == 1 && sb->element_size() == 1,
                      op, ": scales are 1-byte codes");
    TORCH_CHECK_VALUE(sa->device() == a.device() && sb->device() == a.device(),
                      op, ": scales on a different device");
  } else {
    TORCH_CHECK_VALUE(!sa.has_value(), op, ": this op takes no scales");
  }
}

Params checked_params(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                      const c10::optional<at::Tensor>& sa, const c10::optional<at::Tensor>& sb,
                      at::IntArrayRef params) {
  TORCH_CHECK_VALUE(params.size() == size_t(kNumParams), "_gemm: expected ", kNumParams,
                    " parameters, got ", params.size());
  const Params P = parse_params(params.data());
  TORCH_CHECK_VALUE(a.dim() == 3 && b.dim() == 3 && c.dim() == 3,
                    "_gemm: a, b, c must be 3-D (batch, rows, cols)");
  TORCH_CHECK_VALUE(a.size(0) == b.size(0) && a.size(0) == c.size(0), "_gemm: batch sizes differ");
  TORCH_CHECK_VALUE(a.size(2) == b.size(1), "_gemm: inner dimensions differ: ", a.sizes(), " @ ",
                    b.sizes());
  TORCH_CHECK_VALUE(c.size(1) == a.size(1) && c.size(2) == b.size(2), "_gemm: c has shape ",
                    c.sizes(), ", expected (", a.size(0), ", ", a.size(1), ", ", b.size(2), ")");
  TORCH_CHECK_VALUE(a.device() == b.device() && a.device() == c.device(),
                    "_gemm: tensors on different devices");
  TORCH_CHECK_VALUE(P.L >= 1 && P.L <= 256, "_gemm: L out of range");
  check_scales("_gemm", a, b, sa, sb, P);
  if (P.op == kFma || P.op == kFtzAddMul) {
    const auto want = P.rho == kRneFp64 ? at::kDouble : at::kFloat;
    TORCH_CHECK_VALUE(a.scalar_type() == want && b.scalar_type() == want && c.scalar_type() == want,
                      "_gemm: fma/ftz_addmul take ", want, " values");
  } else {
    TORCH_CHECK_VALUE(a.element_size() <= 4 && b.element_size() <= 4, "_gemm: codes up to 32 bits");
    TORCH_CHECK_VALUE(c.element_size() == (P.rho == kRneFp16 ? 2 : 4),
                      "_gemm: c must hold output-format codes");
  }
  return P;
}

namespace {
at::Tensor gemm_cpu_entry(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                          const c10::optional<at::Tensor>& sa, const c10::optional<at::Tensor>& sb,
                          at::IntArrayRef params) {
  const Params P = checked_params(a, b, c, sa, sb, params);
  TORCH_CHECK_VALUE(a.device().is_cpu(), "_gemm (CPU kernel) got a ", a.device(), " tensor");
  return gemm_cpu(a, b, c, sa, sb, P);
}
}  // namespace

}  // namespace mma

TORCH_LIBRARY(mma_emu, m) {
  m.def("_gemm(Tensor a, Tensor b, Tensor c, Tensor? scale_a, Tensor? scale_b, int[] params) -> Tensor");
}

TORCH_LIBRARY_IMPL(mma_emu, CPU, m) { m.impl("_gemm", &mma::gemm_cpu_entry); }

// Importable as torch_mma_emu._C (loading it runs the registrations above).  _C._layout()
// returns the interface's names (core/layout.h) for torch_mma_emu/cpp.py.
#include <Python.h>

namespace {
PyObject* names_tuple(const char* const* names, Py_ssize_t n) {
  PyObject* t = PyTuple_New(n);
  if (t == nullptr) return nullptr;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* s = PyUnicode_FromString(names[i]);
    if (s == nullptr) { Py_DECREF(t); return nullptr; }
    PyTuple_SET_ITEM(t, i, s);
  }
  return t;
}

PyObject* layout(PyObject*, PyObject*) {
  static const char* const params[] = {MMA_PARAMS(MMA_QUOTED)};
  static const char* const ops[] = {MMA_OPS(MMA_PY_NAME)};
  static const char* const rhos[] = {MMA_RHOS(MMA_PY_NAME)};
  static const char* const nan_styles[] = {MMA_NAN_STYLES(MMA_PY_NAME)};
  static const char* const sched_ops[] = {MMA_SCHED_OPS(MMA_PY_NAME)};
  static_assert(sizeof(params) / sizeof(params[0]) == mma::kNumParams);
  struct Entry { const char* key; const char* const* names; Py_ssize_t n; };
  const Entry entries[] = {
      {"params", params, Py_ssize_t(sizeof(params) / sizeof(params[0]))},
      {"ops", ops, Py_ssize_t(sizeof(ops) / sizeof(ops[0]))},
      {"rhos", rhos, Py_ssize_t(sizeof(rhos) / sizeof(rhos[0]))},
      {"nan_styles", nan_styles, Py_ssize_t(sizeof(nan_styles) / sizeof(nan_styles[0]))},
      {"sched_ops", sched_ops, Py_ssize_t(sizeof(sched_ops) / sizeof(sched_ops[0]))}};
  PyObject* d = PyDict_New();
  if (d == nullptr) return nullptr;
  for (const Entry& e : entries) {
    PyObject* t = names_tuple(e.names, e.n);
    if (t == nullptr || PyDict_SetItemString(d, e.key, t) != 0) {
      Py_XDECREF(t);
      Py_DECREF(d);
      return nullptr;
    }
    Py_DECREF(t);
  }
  return d;
}

PyMethodDef methods[] = {
    {"_layout", layout, METH_NOARGS,
     "The names of the parameter vector, ops, rhos, NaN styles and schedule opcodes, in "
     "order (csrc/core/layout.h)."},
    {nullptr, nullptr, 0, nullptr}};
}  // namespace

extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, methods};
  return PyModule_Create(&module_def);
}
