// kvflash._kvflash: the native half of the Python package, a thin binding of the C++ API
// (include/kvflash). Tensors arrive as addresses (integers) and byte strides: the Python half
// (python/kvflash/_tensors.py) reads them off NumPy arrays and torch tensors after checking dtype,
// device and shape, so that every address it passes lies inside its tensor. Everything else is
// the library's: validate() checks problems, strides, alignment and lengths, and its errors
// become Python exceptions here (raise_error). One translation unit, no torch headers: the module
// builds in seconds and works with any torch version.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "kvflash/device.hpp"
#include "kvflash/formats.hpp"
#include "kvflash/problem.hpp"
#include "kvflash/registry.hpp"
#include "kvflash/status.hpp"
#include "kvflash/version.h"

namespace py = pybind11;
using namespace kvflash;

namespace {

// The library's error codes as Python's exception types (docs/python.md lists them).
[[noreturn]] void raise_error(const Error& e) {
  PyObject* type = PyExc_RuntimeError;  // backend_error, internal
  switch (e.code) {
    case ErrorCode::invalid_argument:
      type = PyExc_ValueError;
      break;
    case ErrorCode::unsupported:
      type = PyExc_NotImplementedError;
      break;
    case ErrorCode::out_of_memory:
      type = PyExc_MemoryError;
      break;
    default:
      break;
  }
  PyErr_SetString(type, e.message.c_str());
  throw py::error_already_set();
}

void check(const Status& s) {
  if (!s) raise_error(s.error());
}

KvType kv_type(const std::string& name) {
  const auto t = kv_type_from_name(name);
  if (!t) {
    raise_error(invalid_argument("kv_type=\"" + name + "\" is not a type name (allowed: " +
                                 std::string(kv_type_names()) + ")"));
  }
  return *t;
}

template <class T>
T* address(uintptr_t a) {
  return reinterpret_cast<T*>(a);  // NOLINT(performance-no-int-to-ptr)
}

// Rows of values: floats at 4-byte, stored rows at 2-byte aligned addresses (the C API's rule,
// kvflash_quantize); whole rows keep that alignment, since every block is an even byte count.
void check_rows(const char* what, uintptr_t floats, uintptr_t rows, int64_t n) {
  if (n <= 0) raise_error(invalid_argument(std::string(what) + ": a row of 0 values"));
  if (floats % alignof(float) != 0 || rows % 2 != 0) {
    raise_error(invalid_argument(std::string(what) + ": misaligned buffer (allowed: floats at a "
                                                     "multiple of 4 bytes, rows of 2)"));
  }
}

py::dict type_info(const std::string& name) {
  const KvTypeTraits t = traits(kv_type(name));
  py::dict d;
  d["name"] = std::string(t.name);
  d["block_values"] = t.block_values;
  d["block_bytes"] = t.block_bytes;
  d["code_bits"] = t.code_bits;
  d["rotated"] = t.rotated;
  return d;
}

py::dict supported_space() {
  py::list dims;
  for (const HeadDims hd : SupportedSpace::head_dims) dims.append(py::make_tuple(hd.k, hd.v));
  py::list types;
  for (const KvType t : kAllKvTypes) types.append(std::string(to_string(t)));
  py::dict d;
  d["kv_types"] = types;
  d["head_dims"] = dims;
  d["max_kv_len"] = SupportedSpace::max_kv_len;
  d["max_q_tokens"] = SupportedSpace::max_q_tokens;
  d["max_seqs"] = SupportedSpace::max_seqs;
  d["max_q_heads"] = SupportedSpace::max_q_heads;
  return d;
}

py::list kernels() {
  py::list out;
  for (const KernelCandidate& c : kernel_candidates()) {
    py::dict d;
    d["name"] = c.name;
    d["backend"] = std::string(to_string(c.backend));
    d["priority"] = c.priority;
    d["opt_in_only"] = c.opt_in_only;
    out.append(d);
  }
  return out;
}

Plan make_plan(const AttentionProblem& p, const std::string& backend, const std::string& force,
               const py::list& exclude, int32_t n_threads, bool read_environment) {
  PlanOptions opt;
  if (!backend.empty()) {
    opt.select.backend = backend_from_name(backend);
    if (!opt.select.backend) {
      raise_error(invalid_argument("backend=\"" + backend + "\" is unknown (allowed: cpu, cuda)"));
    }
  }
  opt.select.force = force;
  for (const py::handle name : exclude) opt.select.exclude.push_back(py::cast<std::string>(name));
  opt.select.read_environment = read_environment;
  opt.n_threads = n_threads;
  Expected<Plan> plan = kvflash::plan(p, opt);
  if (!plan) raise_error(plan.error());
  return *plan;
}

// CPU kernels run to completion and read only the buffers the caller keeps alive, so the
// interpreter is released meanwhile; CUDA kernels only enqueue.
void run(const Plan& plan, const AttentionTensors& t, uintptr_t workspace, uintptr_t stream) {
  Status s;
  {
    py::gil_scoped_release released;
    s = kvflash::run(plan, t, address<void>(workspace), address<void>(stream));
  }
  check(s);
}

void bind_formats(py::module_& m) {
  m.def("type_info", &type_info);
  m.def("row_size", [](const std::string& t, int64_t n) {
    if (n <= 0) raise_error(invalid_argument("n=" + std::to_string(n) + " is not a row length"));
    return row_size(kv_type(t), n);
  });
  m.def("supported_space", &supported_space);
  m.def("quantize_rows", [](const std::string& t, uintptr_t src, int64_t n_rows, int64_t n,
                            uintptr_t dst) {
    check_rows("quantize", src, dst, n);
    const KvType type = kv_type(t);
    py::gil_scoped_release released;
    quantize_rows(type, address<const float>(src), n_rows, n, address<void>(dst));
  });
  m.def("dequantize_rows", [](const std::string& t, uintptr_t src, int64_t n_rows, int64_t n,
                              uintptr_t dst) {
    check_rows("dequantize", dst, src, n);
    const KvType type = kv_type(t);
    const size_t bytes = row_size(type, n);
    py::gil_scoped_release released;
    for (int64_t r = 0; r < n_rows; ++r) {
      dequantize_row(type, address<const uint8_t>(src) + r * bytes, n,
                     address<float>(dst) + r * n);
    }
  });
  // Untested on a GPU so far (no device in the development VM): the host's bytes on the device,
  // enqueued on `stream` without synchronizing (gpu::quantize_rows).
  m.def("cuda_quantize_rows", [](const std::string& t, uintptr_t src, int64_t n_rows, int64_t n,
                                 uintptr_t dst, uintptr_t stream) {
    check_rows("quantize", src, dst, n);
    check(gpu::quantize_rows(kv_type(t), address<const float>(src), n_rows, n,
                             address<void>(dst), address<void>(stream)));
  });
  m.def("cuda_device_count", &cuda_device_count);
}

void bind_problem(py::module_& m) {
  py::class_<AttentionProblem>(m, "Problem")
      .def(py::init<>())
      .def_readwrite("n_seqs", &AttentionProblem::n_seqs)
      .def_readwrite("n_q_tokens", &AttentionProblem::n_q_tokens)
      .def_readwrite("n_q_heads", &AttentionProblem::n_q_heads)
      .def_readwrite("n_kv_heads", &AttentionProblem::n_kv_heads)
      .def_property(
          "head_dim_k", [](const AttentionProblem& p) { return p.head_dim.k; },
          [](AttentionProblem& p, int32_t d) { p.head_dim.k = d; })
      .def_property(
          "head_dim_v", [](const AttentionProblem& p) { return p.head_dim.v; },
          [](AttentionProblem& p, int32_t d) { p.head_dim.v = d; })
      .def_property(
          "k_type", [](const AttentionProblem& p) { return std::string(to_string(p.k_type)); },
          [](AttentionProblem& p, const std::string& t) { p.k_type = kv_type(t); })
      .def_property(
          "v_type", [](const AttentionProblem& p) { return std::string(to_string(p.v_type)); },
          [](AttentionProblem& p, const std::string& t) { p.v_type = kv_type(t); })
      .def_readwrite("kv_capacity", &AttentionProblem::kv_capacity)
      .def_readwrite("scale", &AttentionProblem::scale)
      .def_readwrite("causal", &AttentionProblem::causal)
      .def_readwrite("has_mask", &AttentionProblem::has_mask)
      .def_readwrite("window", &AttentionProblem::window)
      .def_readwrite("softcap", &AttentionProblem::softcap)
      .def_readwrite("has_sinks", &AttentionProblem::has_sinks)
      .def_readwrite("has_alibi", &AttentionProblem::has_alibi)
      .def_readwrite("page_size", &AttentionProblem::page_size)
      .def("validate", [](const AttentionProblem& p) { check(validate(p)); })
      .def("__eq__", [](const AttentionProblem& a, const AttentionProblem& b) { return a == b; })
      .def("__repr__", [](const AttentionProblem& p) { return "Problem(" + describe(p) + ")"; });
}

// Pointer fields as integer properties: the addresses the Python half reads off its tensors.
template <class C, class T>
void pointer_property(py::class_<C>& c, const char* name, T* C::*field) {
  c.def_property(
      name, [field](const C& o) { return reinterpret_cast<uintptr_t>(o.*field); },
      [field](C& o, uintptr_t a) { o.*field = address<T>(a); });
}

void bind_tensors(py::module_& m) {
  py::class_<KvTensor> kv(m, "KvTensor");
  kv.def(py::init<>())
      .def_readwrite("stride_token", &KvTensor::stride_token)
      .def_readwrite("stride_head", &KvTensor::stride_head)
      .def_readwrite("stride_seq", &KvTensor::stride_seq)
      .def_readwrite("pages_per_seq", &KvTensor::pages_per_seq)
      .def_readwrite("n_pages", &KvTensor::n_pages)
      .def_readwrite("stride_page", &KvTensor::stride_page);
  pointer_property(kv, "data", &KvTensor::data);
  pointer_property(kv, "page_table", &KvTensor::page_table);

  py::class_<AttentionTensors> t(m, "Tensors");
  t.def(py::init<>())
      .def_readwrite("k", &AttentionTensors::k)
      .def_readwrite("v", &AttentionTensors::v)
      .def_readwrite("mask_stride", &AttentionTensors::mask_stride);
  pointer_property(t, "q", &AttentionTensors::q);
  pointer_property(t, "kv_lens", &AttentionTensors::kv_lens);
  pointer_property(t, "mask", &AttentionTensors::mask);
  pointer_property(t, "sinks", &AttentionTensors::sinks);
  pointer_property(t, "alibi_slopes", &AttentionTensors::alibi_slopes);
  pointer_property(t, "out", &AttentionTensors::out);
  pointer_property(t, "lse", &AttentionTensors::lse);
}

void bind_plan(py::module_& m) {
  // The problem by value: a reference would let Python edit a planned problem under its kernel.
  py::class_<Plan>(m, "NativePlan")
      .def_property_readonly("problem", [](const Plan& p) { return p.problem; })
      .def_property_readonly("kernel", [](const Plan& p) { return p.kernel->name; })
      .def_property_readonly("backend",
                             [](const Plan& p) { return std::string(to_string(p.kernel->backend)); })
      .def_readonly("n_threads", &Plan::n_threads)
      .def_readonly("n_splits", &Plan::n_splits)
      .def_readonly("workspace_bytes", &Plan::workspace_bytes);
  m.def("plan", &make_plan, py::arg("problem"), py::arg("backend"), py::arg("force"),
        py::arg("exclude"), py::arg("n_threads"), py::arg("read_environment"));
  m.def("validate", [](const Plan& p, const AttentionTensors& t) { check(validate(p, t)); });
  m.def("run", &run, py::arg("plan"), py::arg("tensors"), py::arg("workspace"),
        py::arg("stream"));
  m.def("kernels", &kernels);
}

}  // namespace

PYBIND11_MODULE(_kvflash, m) {
  m.attr("__version__") = KVFLASH_VERSION_STRING;
  bind_formats(m);
  bind_problem(m);
  bind_tensors(m);
  bind_plan(m);
}
