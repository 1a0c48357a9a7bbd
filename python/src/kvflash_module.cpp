// kvflash._kvflash: the native half of the Python package, a thin binding of the C++ API
// (include/kvflash). Tensors arrive as addresses (integers) and byte strides: the Python half
// (python/kvflash/_tensors.py) reads them off NumPy arrays and torch tensors after checking dtype,
// device and shape, so that every address it passes lies inside its tensor. Everything else is
// the library's: validate() checks problems, strides, alignment and lengths, and its errors
// become Python exceptions here (raise_error). One translation unit, no torch headers: the module
// builds in seconds and works with any torch version.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

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

// The C++ loop of scripts/python_overhead.py: n calls of run() on one set of tensors, the cost
// that the Python call is compared with.
void bench_run(const Plan& plan, const AttentionTensors& t, uintptr_t workspace, uintptr_t stream,
               int64_t n) {
  Status s;
  {
    py::gil_scoped_release released;
    for (int64_t i = 0; i < n && s; ++i) {
      s = kvflash::run(plan, t, address<void>(workspace), address<void>(stream));
    }
  }
  check(s);
}

// Plan.run's fast path (docs/python.md, "Plans"). The first call with a new set of tensors goes
// through the Python checks (attention.py), which then remember() what they accepted: each
// argument's kind, shape, strides, dtype and device (its signature) and the AttentionTensors
// they derived (strides, page counts, the mask's stride), everything but the addresses. A later
// call whose arguments all have the remembered signatures only needs their addresses: try_run
// reads them here and runs; any difference (a shape, a stride, a dtype, a device, None for a
// tensor or the reverse, a read-only array) returns false and the call goes back through the
// Python checks, which name the argument or remember the new signatures. The library's own
// checks (validate(plan, tensors): alignment, null pointers; host lengths and offsets) still run
// on every call, inside kvflash::run.
class Runner {
 public:
  enum Arg { q, k, v, kv_lens, page_table, sinks, alibi, mask, out, lse, q_offsets, n_args };

  Runner(const Plan& plan, uintptr_t workspace, py::object tensor_type, int device_index,
         py::object current_device, py::object current_stream)
      : plan_(plan),
        workspace_(workspace),
        tensor_type_(std::move(tensor_type)),
        current_device_(std::move(current_device)),
        current_stream_(std::move(current_stream)),
        device_index_(device_index) {}

  // Runs and returns true when every argument has its remembered signature; else false (nothing
  // run, no exception).
  bool try_run(const std::array<py::handle, n_args>& args) {
    if (!remembered_) return false;
    AttentionTensors t = tensors_;
    std::array<uintptr_t, n_args> a{};
    for (int i = 0; i < n_args; ++i) {
      if (!signatures_[i].matches(args[i], tensor_type_, a[i])) return false;
    }
    uintptr_t stream = 0;
    if (device_index_ >= 0) {  // CUDA: the plan's device must be current; torch's stream
      if (!same_int(current_device_(), device_index_)) return false;
      stream = py::cast<uintptr_t>(current_stream_(device_index_));
    }
    t.q = address<const float>(a[q]);
    t.k.data = address<const void>(a[k]);
    t.v.data = address<const void>(a[v]);
    t.k.page_table = t.v.page_table = address<const int32_t>(a[page_table]);
    t.kv_lens = address<const int64_t>(a[kv_lens]);
    t.sinks = address<const float>(a[sinks]);
    t.alibi_slopes = address<const float>(a[alibi]);
    t.mask = address<const float>(a[mask]);
    t.out = address<float>(a[out]);
    t.lse = address<float>(a[lse]);
    t.q_offsets = address<const int32_t>(a[q_offsets]);
    execute(t, stream);
    return true;
  }

  // After the Python checks accepted these arguments, which `t` describes (addresses included).
  // `packed_rows`: ragged host plans, the rows of q / out / lse, which the offsets must not pass.
  // tensor_type: torch.Tensor where torch is imported (a NumPy user's plan may meet it later).
  void remember(const std::array<py::handle, n_args>& args, const AttentionTensors& t,
                int64_t packed_rows, py::object tensor_type) {
    remembered_ = false;
    tensor_type_ = std::move(tensor_type);
    for (int i = 0; i < n_args; ++i) signatures_[i] = Signature::of(args[i], tensor_type_);
    tensors_ = t;
    packed_rows_ = packed_rows;
    remembered_ = true;
  }

  void forget() { remembered_ = false; }

  // A workspace of the plan's workspace_bytes for the calls from now on (kvflash.attention's
  // cached CUDA plans take a new one from torch's stream-ordered allocator per call).
  void set_workspace(uintptr_t workspace) { workspace_ = workspace; }

  void execute(const AttentionTensors& t, uintptr_t stream) {
    Status s;
    const int64_t packed_rows = packed_rows_;  // read under the interpreter lock
    {
      py::gil_scoped_release released;
      // Ragged host plans: the offsets are read on the host, checked, and must stay inside the
      // packed tensors, whose rows the signature fixed.
      if (plan_.problem.ragged_q && device_index_ < 0) {
        s = validate_q_offsets(plan_.problem, t.q_offsets);
        if (s && q_total_rows(plan_.problem, t.q_offsets) > packed_rows) {
          s = invalid_argument(
              "q_offsets[n_seqs]=" + std::to_string(q_total_rows(plan_.problem, t.q_offsets)) +
              " is more rows than q, out and lse have (allowed: 0 .. " +
              std::to_string(packed_rows) + ")");
        }
      }
      if (s) s = kvflash::run(plan_, t, address<void>(workspace_), address<void>(stream));
    }
    check(s);
  }

 private:
  // What the Python checks read off an argument: None, a NumPy array (shape, byte strides, type,
  // byte order, writeable) or a torch tensor (shape, strides, dtype, device objects, compared
  // with ==).
  struct Signature {
    enum Kind { none, numpy, torch, other } kind = none;
    std::vector<py::ssize_t> shape, strides;
    int type_num = 0;
    char byteorder = 0;
    bool writeable = false;
    py::object shape_obj, strides_obj, dtype, device;

    static Signature of(py::handle h, py::handle tensor_type) {
      Signature s;
      if (h.is_none()) return s;
      if (py::isinstance<py::array>(h)) {
        auto a = py::reinterpret_borrow<py::array>(h);
        s.kind = numpy;
        s.shape.assign(a.shape(), a.shape() + a.ndim());
        s.strides.assign(a.strides(), a.strides() + a.ndim());
        s.type_num = a.dtype().num();
        s.byteorder = a.dtype().byteorder();
        s.writeable = a.writeable();
        return s;
      }
      if (PyObject_IsInstance(h.ptr(), tensor_type.ptr()) == 1) {
        s.kind = torch;
        s.shape_obj = h.attr("shape");
        s.strides_obj = h.attr("stride")();
        s.dtype = h.attr("dtype");
        s.device = h.attr("device");
        return s;
      }
      PyErr_Clear();
      s.kind = other;  // never matches: the Python checks explain
      return s;
    }

    bool matches(py::handle h, py::handle tensor_type, uintptr_t& addr) const {
      switch (kind) {
        case none:
          addr = 0;
          return h.is_none();
        case numpy: {
          if (!py::isinstance<py::array>(h)) return false;
          auto a = py::reinterpret_borrow<py::array>(h);
          const auto n = static_cast<size_t>(a.ndim());
          if (n != shape.size()) return false;
          for (size_t i = 0; i < n; ++i) {
            if (a.shape()[i] != shape[i] || a.strides()[i] != strides[i]) return false;
          }
          const auto* descr =
              py::detail::array_descriptor_proxy(py::detail::array_proxy(h.ptr())->descr);
          if (descr->type_num != type_num || descr->byteorder != byteorder) return false;
          if (writeable && !a.writeable()) return false;  // only out / lse need it, and had it
          addr = reinterpret_cast<uintptr_t>(a.data());
          return true;
        }
        case torch: {
          if (h.is_none() || PyObject_IsInstance(h.ptr(), tensor_type.ptr()) != 1) {
            PyErr_Clear();
            return false;
          }
          return torch_matches(h, addr);
        }
        default:
          return false;
      }
    }

    bool torch_matches(py::handle h, uintptr_t& addr) const {
      // Attribute lookups by interned names; any exception is a miss (the Python path explains).
      static PyObject* const n_dtype = PyUnicode_InternFromString("dtype");
      static PyObject* const n_device = PyUnicode_InternFromString("device");
      static PyObject* const n_shape = PyUnicode_InternFromString("shape");
      static PyObject* const n_stride = PyUnicode_InternFromString("stride");
      static PyObject* const n_data_ptr = PyUnicode_InternFromString("data_ptr");
      auto same = [&](PyObject* got, const py::object& want, bool identity) {
        if (got == nullptr) return false;
        const int eq =
            identity ? int{got == want.ptr()} : PyObject_RichCompareBool(got, want.ptr(), Py_EQ);
        Py_DECREF(got);
        return eq == 1;
      };
      bool ok = same(PyObject_GetAttr(h.ptr(), n_dtype), dtype, true) &&
                same(PyObject_GetAttr(h.ptr(), n_device), device, false) &&
                same(PyObject_GetAttr(h.ptr(), n_shape), shape_obj, false) &&
                same(PyObject_CallMethodNoArgs(h.ptr(), n_stride), strides_obj, false);
      if (ok) {
        PyObject* p = PyObject_CallMethodNoArgs(h.ptr(), n_data_ptr);
        ok = p != nullptr;
        if (ok) {
          addr = static_cast<uintptr_t>(PyLong_AsUnsignedLongLong(p));
          Py_DECREF(p);
        }
      }
      if (PyErr_Occurred()) {
        PyErr_Clear();
        return false;
      }
      return ok;
    }
  };

  static bool same_int(const py::object& o, int want) {
    return PyLong_Check(o.ptr()) && PyLong_AsLong(o.ptr()) == want;
  }

  Plan plan_;
  uintptr_t workspace_;
  py::object tensor_type_, current_device_, current_stream_;
  int device_index_;
  std::array<Signature, n_args> signatures_;
  AttentionTensors tensors_;
  int64_t packed_rows_ = 0;
  bool remembered_ = false;
};

void bind_formats(py::module_& m) {
  m.def("type_info", &type_info);
  m.def("row_size", [](const std::string& t, int64_t n) {
    if (n <= 0) raise_error(invalid_argument("n=" + std::to_string(n) + " is not a row length"));
    return row_size(kv_type(t), n);
  });
  m.def("supported_space", &supported_space);
  m.def("quantize_rows",
        [](const std::string& t, uintptr_t src, int64_t n_rows, int64_t n, uintptr_t dst) {
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
      dequantize_row(type, address<const uint8_t>(src) + r * bytes, n, address<float>(dst) + r * n);
    }
  });
  // The host's bytes on the device, enqueued on `stream` without synchronizing
  // (gpu::quantize_rows).
  m.def("cuda_quantize_rows", [](const std::string& t, uintptr_t src, int64_t n_rows, int64_t n,
                                 uintptr_t dst, uintptr_t stream) {
    check_rows("quantize", src, dst, n);
    check(gpu::quantize_rows(kv_type(t), address<const float>(src), n_rows, n, address<void>(dst),
                             address<void>(stream)));
  });
  // The host's floats on the device, enqueued on `stream` (gpu::dequantize_rows).
  m.def("cuda_dequantize_rows", [](const std::string& t, uintptr_t src, int64_t n_rows, int64_t n,
                                   uintptr_t dst, uintptr_t stream) {
    check_rows("dequantize", dst, src, n);
    check(gpu::dequantize_rows(kv_type(t), address<const void>(src), n_rows, n, address<float>(dst),
                               address<void>(stream)));
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
      .def_readwrite("ragged_q", &AttentionProblem::ragged_q)
      .def_readwrite("k_scale", &AttentionProblem::k_scale)
      .def_readwrite("v_scale", &AttentionProblem::v_scale)
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
  pointer_property(t, "q_offsets", &AttentionTensors::q_offsets);
}

void bind_plan(py::module_& m) {
  // The problem by value: a reference would let Python edit a planned problem under its kernel.
  py::class_<Plan>(m, "NativePlan")
      .def_property_readonly("problem", [](const Plan& p) { return p.problem; })
      .def_property_readonly("kernel", [](const Plan& p) { return p.kernel->name; })
      .def_property_readonly(
          "backend", [](const Plan& p) { return std::string(to_string(p.kernel->backend)); })
      .def_readonly("n_threads", &Plan::n_threads)
      .def_readonly("n_splits", &Plan::n_splits)
      .def_readonly("workspace_bytes", &Plan::workspace_bytes);
  m.def("plan", &make_plan, py::arg("problem"), py::arg("backend"), py::arg("force"),
        py::arg("exclude"), py::arg("n_threads"), py::arg("read_environment"));
  m.def("validate", [](const Plan& p, const AttentionTensors& t) { check(validate(p, t)); });
  m.def("run", &run, py::arg("plan"), py::arg("tensors"), py::arg("workspace"), py::arg("stream"));
  m.def("kernels", &kernels);
  m.def("_bench_run", &bench_run);

  using H = py::handle;
  py::class_<Runner>(m, "Runner")
      .def(py::init<const Plan&, uintptr_t, py::object, int, py::object, py::object>(),
           py::arg("plan"), py::arg("workspace"), py::arg("tensor_type"), py::arg("device_index"),
           py::arg("current_device"), py::arg("current_stream"))
      // Positional, no names: the per-call path (q, k, v, kv_lens, page_table, sinks,
      // alibi_slopes, mask, out, lse, q_offsets).
      .def("try_run",
           [](Runner& r, H q, H k, H v, H lens, H table, H sinks, H alibi, H mask, H out, H lse,
              H offsets) {
             return r.try_run({q, k, v, lens, table, sinks, alibi, mask, out, lse, offsets});
           })
      .def("remember",
           [](Runner& r, H q, H k, H v, H lens, H table, H sinks, H alibi, H mask, H out, H lse,
              H offsets, const AttentionTensors& t, int64_t packed_rows, py::object tensor_type) {
             r.remember({q, k, v, lens, table, sinks, alibi, mask, out, lse, offsets}, t,
                        packed_rows, std::move(tensor_type));
           })
      .def("forget", &Runner::forget)
      .def("set_workspace", &Runner::set_workspace)
      .def("run", &Runner::execute, py::arg("tensors"), py::arg("stream"));
}

}  // namespace

PYBIND11_MODULE(_kvflash, m) {
  m.attr("__version__") = KVFLASH_VERSION_STRING;
  bind_formats(m);
  bind_problem(m);
  bind_tensors(m);
  bind_plan(m);
}
