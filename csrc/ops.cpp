// The mma_emu library: every C++ schema in one registration block, the argument checks of
// _gemm and its CPU kernel, on torch's stable ABI (torch_stable.h).  The public op
// mma_emu::emulated_mm (torch_mma_emu/ops.py) resolves the arch to a Spec and calls _gemm
// with the flat parameter vector; schedule.py calls _sched (sched_ops.cpp).
#include "gemm.h"
#include "sched.h"

namespace mma {

void check_scales(const char* op, const Tensor& a, const Tensor& b, const OptTensor& sa,
                  const OptTensor& sb, const Params& P) {
  MMA_CHECK_VALUE(sa.has_value() == sb.has_value(), op, ": give both scales or none");
  if (P.op == kStFdpa || P.op == kGstFdpa) {
    MMA_CHECK_VALUE(sa.has_value(), op, ": block-scaled op needs scales");
    MMA_CHECK_VALUE(P.block > 0, op, ": block size must be positive");
    const int64_t nblk = (a.size(2) + P.block - 1) / P.block;
    MMA_CHECK_VALUE(sa->dim() == 3 && sa->size(0) == a.size(0) && sa->size(1) == a.size(1) &&
                        sa->size(2) == nblk,
                    op, ": scale_a must have shape (batch, M, ceil(K / block))");
    MMA_CHECK_VALUE(sb->dim() == 3 && sb->size(0) == b.size(0) && sb->size(1) == nblk &&
                        sb->size(2) == b.size(2),
                    op, ": scale_b must have shape (batch, ceil(K / block), N)");
    MMA_CHECK_VALUE(sa->element_size() == 1 && sb->element_size() == 1,
                    op, ": scales are 1-byte codes");
    MMA_CHECK_VALUE(same_device(*sa, a) && same_device(*sb, a),
                    op, ": scales on a different device");
  } else {
    MMA_CHECK_VALUE(!sa.has_value(), op, ": this op takes no scales");
  }
}

Params checked_params(const Tensor& a, const Tensor& b, const Tensor& c, const OptTensor& sa,
                      const OptTensor& sb, const IntList& params) {
  MMA_CHECK_VALUE(params.size() == size_t(kNumParams), "_gemm: expected ", kNumParams,
                  " parameters, got ", params.size());
  const Params P = parse_params(params.data());
  MMA_CHECK_VALUE(a.dim() == 3 && b.dim() == 3 && c.dim() == 3,
                  "_gemm: a, b, c must be 3-D (batch, rows, cols)");
  MMA_CHECK_VALUE(a.size(0) == b.size(0) && a.size(0) == c.size(0), "_gemm: batch sizes differ");
  MMA_CHECK_VALUE(a.size(2) == b.size(1), "_gemm: inner dimensions differ: ", shape_of(a),
                  " @ ", shape_of(b));
  MMA_CHECK_VALUE(c.size(1) == a.size(1) && c.size(2) == b.size(2), "_gemm: c has shape ",
                  shape_of(c), ", expected (", a.size(0), ", ", a.size(1), ", ", b.size(2), ")");
  MMA_CHECK_VALUE(same_device(a, b) && same_device(a, c), "_gemm: tensors on different devices");
  MMA_CHECK_VALUE(P.L >= 1 && P.L <= 256, "_gemm: L out of range");
  check_scales("_gemm", a, b, sa, sb, P);
  if (P.op == kFma || P.op == kFtzAddMul) {
    const auto want = P.rho == kRneFp64 ? ScalarType::Double : ScalarType::Float;
    MMA_CHECK_VALUE(a.scalar_type() == want && b.scalar_type() == want &&
                        c.scalar_type() == want,
                    "_gemm: fma/ftz_addmul take ", want, " values");
  } else {
    MMA_CHECK_VALUE(a.element_size() <= 4 && b.element_size() <= 4, "_gemm: codes up to 32 bits");
    MMA_CHECK_VALUE(c.element_size() == size_t(P.rho == kRneFp16 ? 2 : 4),
                    "_gemm: c must hold output-format codes");
  }
  return P;
}

namespace {
Tensor gemm_cpu_entry(const Tensor& a, const Tensor& b, const Tensor& c, const OptTensor& sa,
                      const OptTensor& sb, const IntList& params) {
  const Params P = checked_params(a, b, c, sa, sb, params);
  MMA_CHECK_VALUE(a.is_cpu(), "_gemm (CPU kernel) got a ", device_name(a.device()), " tensor");
  return gemm_cpu(a, b, c, sa, sb, P);
}

Tensor sched_cpu_entry(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& partials,
                       const IntList& params, const IntList& program,
                       const std::vector<double>& consts, const OptTensor& sa,
                       const OptTensor& sb) {
  return sched_entry<torch::headeronly::DeviceType::CPU, &sched_cpu>(
      a, b, c, partials, params, program, consts, sa, sb);
}
}  // namespace

}  // namespace mma

// The one definition of the library's C++ schemas (the Python ops, emulated_mm and round_to,
// are torch.library.custom_op in torch_mma_emu/ops.py).  _mma_instr exists in CUDA builds
// only: torch_mma_emu.native asks for it by name.
STABLE_TORCH_LIBRARY(mma_emu, m) {
  m.def("_gemm(Tensor a, Tensor b, Tensor c, Tensor? scale_a, Tensor? scale_b, int[] params) "
        "-> Tensor");
  m.def("_sched(Tensor a, Tensor b, Tensor c, Tensor partials, int[] params, int[] program, "
        "float[] consts, Tensor? scale_a=None, Tensor? scale_b=None) -> Tensor");
  m.def("_cpu_fast_path(int[] params) -> str");
  // torch 2.13's CUDA float32 math (core/gpu_math.h; CPU kernels: cpu/gpu_math_cpu.cpp)
  m.def("_gpu_math(Tensor x, str op, Tensor tables) -> Tensor");
  m.def("_fma_f32(Tensor a, Tensor b, Tensor c) -> Tensor");
  m.def("_welford_f32(Tensor x, int threads, int vec, bool rms) -> Tensor");
#ifdef MMA_EMU_WITH_CUDA
  m.def("_mma_instr(Tensor a, Tensor b, Tensor c, int[] cfg) -> Tensor");
#endif
}

STABLE_TORCH_LIBRARY_IMPL(mma_emu, CPU, m) {
  m.impl("_gemm", TORCH_BOX(&mma::gemm_cpu_entry));
  m.impl("_sched", TORCH_BOX(&mma::sched_cpu_entry));
}

// no tensor argument: the dispatcher takes the device-independent kernel
STABLE_TORCH_LIBRARY_IMPL(mma_emu, CompositeExplicitAutograd, m) {
  m.impl("_cpu_fast_path", TORCH_BOX(&mma::cpu_fast_path));
}

// Importable as torch_mma_emu._C (loading it runs the registrations above), written against
// Python's limited API (one build serves every CPython from 3.10): _C._layout() returns the
// interface's names (core/layout.h) for torch_mma_emu/cpp.py, _C._cuda_archs() the CUDA
// targets this build holds ("" for a CPU-only build; torch_mma_emu/cuda_archs.py reads it).
#include <Python.h>

namespace {
PyObject* names_tuple(const char* const* names, Py_ssize_t n) {
  PyObject* t = PyTuple_New(n);
  if (t == nullptr) return nullptr;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* s = PyUnicode_FromString(names[i]);
    if (s == nullptr) { Py_DECREF(t); return nullptr; }
    if (PyTuple_SetItem(t, i, s) != 0) { Py_DECREF(t); return nullptr; }  // steals s
  }
  return t;
}

PyObject* layout(PyObject*, PyObject*) {
  static const char* const params[] = {MMA_PARAMS(MMA_QUOTED)};
  static const char* const ops[] = {MMA_OPS(MMA_PY_NAME)};
  static const char* const rhos[] = {MMA_RHOS(MMA_PY_NAME)};
  static const char* const nan_styles[] = {MMA_NAN_STYLES(MMA_PY_NAME)};
  static const char* const sched_ops[] = {MMA_SCHED_OPS(MMA_PY_NAME)};
  static const char* const instr_kinds[] = {MMA_INSTR_KINDS(MMA_PY_STRING)};
  static const char* const instr_types[] = {MMA_INSTR_TYPES(MMA_PY_STRING)};
  static_assert(sizeof(params) / sizeof(params[0]) == mma::kNumParams);
  struct Entry { const char* key; const char* const* names; Py_ssize_t n; };
  const Entry entries[] = {
      {"params", params, Py_ssize_t(sizeof(params) / sizeof(params[0]))},
      {"ops", ops, Py_ssize_t(sizeof(ops) / sizeof(ops[0]))},
      {"rhos", rhos, Py_ssize_t(sizeof(rhos) / sizeof(rhos[0]))},
      {"nan_styles", nan_styles, Py_ssize_t(sizeof(nan_styles) / sizeof(nan_styles[0]))},
      {"sched_ops", sched_ops, Py_ssize_t(sizeof(sched_ops) / sizeof(sched_ops[0]))},
      {"instr_kinds", instr_kinds, Py_ssize_t(sizeof(instr_kinds) / sizeof(instr_kinds[0]))},
      {"instr_types", instr_types, Py_ssize_t(sizeof(instr_types) / sizeof(instr_types[0]))}};
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

// setup.py passes the arch list as one token, '_' between the archs (8.0_9.0a)
#define MMA_STRINGIZE_(x) #x
#define MMA_STRINGIZE(x) MMA_STRINGIZE_(x)

PyObject* cuda_archs(PyObject*, PyObject*) {
#ifdef MMA_EMU_CUDA_ARCHS
  return PyUnicode_FromString(MMA_STRINGIZE(MMA_EMU_CUDA_ARCHS));
#else
  return PyUnicode_FromString("");
#endif
}

PyMethodDef methods[] = {
    {"_cuda_archs", cuda_archs, METH_NOARGS,
     "The CUDA archs this build's kernels were compiled for, '_' between them ('' without "
     "CUDA)."},
    {"_layout", layout, METH_NOARGS,
     "The names of the parameter vector, ops, rhos, NaN styles, schedule opcodes and the "
     "instruction kernels' kinds and operand types, in order (csrc/core/layout.h)."},
    {nullptr, nullptr, 0, nullptr}};
}  // namespace

extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, methods};
  return PyModule_Create(&module_def);
}
