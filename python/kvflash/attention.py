"""Attention from Python through the library's plan/run (include/kvflash/registry.hpp).

Layouts (the shapes engines keep; docs/python.md):
  q, out     (batch, q_tokens, q_heads, head_dim) float32, contiguous
  lse        (batch, q_tokens, q_heads) float32, contiguous (natural log)
  k/v cache  (batch, capacity, kv_heads, row), any strides but a contiguous row; or paged:
             (n_pages, page_size, kv_heads, row) with page_table (batch, pages_per_seq) int32
  row        head_dim values of a float32/float16/bfloat16 tensor (f32/f16/bf16 caches), or
             row_size(type, head_dim) bytes of a uint8 tensor (any type, named by k_type=/v_type=)
  kv_lens    (batch,) int64: tokens per sequence (None: every sequence is full)
The tensors live on the plan's device: host memory for the CPU backend, one CUDA device for the
CUDA backend, whose calls are enqueued on torch's current stream without synchronizing.
"""

import contextlib
import sys
import threading

import numpy as np

from . import _kvflash
from ._tensors import (optional_view, require_contiguous, require_device, require_dtype,
                       require_last_dim_contiguous, require_ndim, require_shape,
                       require_writeable, view)
from .formats import row_size, supported_space

# Float caches name their own type; uint8 caches hold the bytes of the type the caller names.
_FLOAT_KV_TYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}


def _cache_type(t, given, arg):
    if t.dtype == "uint8":
        if given is None:
            raise TypeError(f"{t.name}: uint8 bytes need {arg}= to name their KV type")
        return given
    own = _FLOAT_KV_TYPES.get(t.dtype)
    if own is None:
        raise TypeError(f"{t.name}: dtype {t.dtype}, expected uint8 (the bytes of any KV type), "
                        "float32, float16 or bfloat16")
    if given not in (None, own):
        raise TypeError(f"{t.name}: dtype {t.dtype} holds {own}, not {arg}={given!r} (pass its "
                        "bytes as uint8)")
    return own


def _default_v_head_dim(k_head_dim):
    """The supported space's V head dim for K's (192 -> 128, 576 -> 512, else the same)."""
    return dict(supported_space()["head_dims"]).get(k_head_dim, k_head_dim)


def _v_head_dim(k_head_dim, v):
    """V's head dim: a float cache's row length; for bytes, the default for K's."""
    return v.shape[-1] if v.dtype in _FLOAT_KV_TYPES else _default_v_head_dim(k_head_dim)


def _require_rows(t, kv_type, head_dim):
    require_last_dim_contiguous(t)
    want = head_dim if t.dtype in _FLOAT_KV_TYPES else row_size(kv_type, head_dim)
    if t.shape[-1] != want:
        unit = "values" if t.dtype in _FLOAT_KV_TYPES else f"bytes ({kv_type}, {head_dim} values)"
        raise ValueError(f"{t.name}: rows of {t.shape[-1]}, expected {want} {unit}")


def _shape_problem(q, k, v, page_table, k_type, v_type, head_dim_v, q_offsets=None,
                   q_tokens=None):
    """The problem's fields that the tensors' shapes fix: one derivation for Plan.for_tensors and
    for Plan.run's check that the tensors fit the plan. Ragged (q_offsets given): q is packed
    (total, q_heads, head_dim), the batch is q_offsets' length - 1, and q_tokens (the most
    queries of a sequence) comes from the caller."""
    for t in (k, v):
        require_ndim(t, 4, "(batch, capacity, kv_heads, row) or, paged, "
                           "(n_pages, page_size, kv_heads, row)")
    p = _kvflash.Problem()
    if q_offsets is None:
        require_ndim(q, 4, "(batch, q_tokens, q_heads, head_dim)")
        p.n_seqs, p.n_q_tokens, p.n_q_heads, p.head_dim_k = q.shape
    else:
        require_ndim(q, 3, "(total, q_heads, head_dim): packed rows, as q_offsets says")
        require_ndim(q_offsets, 1, "(batch + 1,)")
        p.ragged_q = True
        p.n_seqs, p.n_q_tokens = q_offsets.shape[0] - 1, q_tokens
        p.n_q_heads, p.head_dim_k = q.shape[1:]
    p.k_type = _cache_type(k, k_type, "k_type")
    p.v_type = _cache_type(v, v_type, "v_type")
    p.head_dim_v = head_dim_v if head_dim_v is not None else _v_head_dim(p.head_dim_k, v)
    _require_rows(k, p.k_type, p.head_dim_k)
    _require_rows(v, p.v_type, p.head_dim_v)
    p.n_kv_heads = k.shape[2]
    if page_table is None:
        p.kv_capacity = k.shape[1]
        require_shape(k, (p.n_seqs, None, None, None), " (batch from q)")
        require_shape(v, (p.n_seqs, p.kv_capacity, p.n_kv_heads, None), " (from q and k_cache)")
    else:
        require_shape(page_table, (p.n_seqs, None), " (batch from q, pages per sequence)")
        p.page_size = k.shape[1]
        p.kv_capacity = page_table.shape[1] * p.page_size
        require_shape(v, (None, p.page_size, p.n_kv_heads, None), " (pages as in k_cache)")
    return p


def _max_step(offsets):
    """The largest step of host offsets (at least 1): the most queries of a sequence."""
    if offsets.device != "cpu":
        raise ValueError("q_offsets: on a CUDA device; pass max_q_tokens= (the most queries of "
                         "a sequence) to plan without reading them")
    require_dtype(offsets, "int32")
    require_ndim(offsets, 1, "(batch + 1,)")
    steps = np.diff(np.asarray(offsets.obj.numpy() if offsets.is_torch else offsets.obj))
    return max(1, int(steps.max())) if steps.size else 1


def _set_features(p, causal, window, softcap, scale, sinks, alibi, mask, k_scale=1.0,
                  v_scale=1.0):
    p.causal = bool(causal)
    p.window = int(window or 0)
    p.softcap = float(softcap or 0.0)
    p.scale = float(scale or 0.0)  # 0: the library's 1/sqrt(head_dim)
    # fp8 caches hold K / k_scale and V / v_scale (vLLM's per-layer scales); 1 for other types.
    p.k_scale, p.v_scale = float(k_scale), float(v_scale)
    p.has_sinks, p.has_alibi, p.has_mask = bool(sinks), bool(alibi), bool(mask)


# Which argument each shape-derived field comes from, for Plan.run's messages.
_FIELD_ARGUMENT = {"ragged_q": "q_offsets", "n_seqs": "q", "n_q_tokens": "q", "n_q_heads": "q",
                   "head_dim_k": "q",
                   "n_kv_heads": "k_cache", "head_dim_v": "v_cache", "page_size": "k_cache",
                   "kv_capacity": "k_cache", "k_type": "k_cache",
                   "v_type": "v_cache"}


def _device_name(device):
    """"cpu" or "cuda:N", as _tensors.view names a tensor's device ("cuda": the current one)."""
    device = str(device)
    if device == "cuda":
        import torch
        device = f"cuda:{torch.cuda.current_device()}"
    return device


def _on_device(device):
    """The CUDA device current while planning and running (the library plans for the current
    device and enqueues on its stream)."""
    if device == "cpu":
        return contextlib.nullcontext()
    import torch
    return torch.cuda.device(device)


def _backend(device):
    return "cpu" if device == "cpu" else "cuda"


def _torch():
    return sys.modules.get("torch")  # never imported here: NumPy users need no torch


class _NoTensor:
    """The runner's tensor type while torch is not imported: nothing is an instance."""


def _tensor_type():
    torch = _torch()
    return torch.Tensor if torch is not None else _NoTensor


class Plan:
    """One attention problem, planned once: the kernel, its workspace (owned here) and the device.
    run() allocates nothing but `out` / `lse` when they are not given.

    Plan(q_heads=32, kv_heads=8, head_dim=128, kv_capacity=4096, k_type="q8_0", v_type="q8_0")
    or Plan.for_tensors(q, k_cache, v_cache, ...) for the problem a call's tensors describe.
    """

    def __init__(self, *, q_heads, kv_heads, head_dim, kv_capacity, k_type="f16", v_type="f16",
                 head_dim_v=None, batch=1, q_tokens=1, page_size=0, causal=True, window=0,
                 softcap=0.0, scale=None, sinks=False, alibi=False, mask=False, device="cpu",
                 kernel=None, exclude=(), n_threads=0, ragged=False, k_scale=1.0, v_scale=1.0):
        p = _kvflash.Problem()
        p.n_seqs, p.n_q_tokens, p.n_q_heads, p.n_kv_heads = batch, q_tokens, q_heads, kv_heads
        p.head_dim_k = head_dim
        p.head_dim_v = head_dim_v if head_dim_v is not None else _default_v_head_dim(head_dim)
        p.k_type, p.v_type, p.kv_capacity, p.page_size = k_type, v_type, kv_capacity, page_size
        p.ragged_q = bool(ragged)  # q_tokens: then the most queries of any sequence
        _set_features(p, causal, window, softcap, scale, sinks, alibi, mask, k_scale, v_scale)
        self._make(p, _device_name(device), kernel, exclude, n_threads)

    @classmethod
    def for_tensors(cls, q, k_cache, v_cache, *, k_type=None, v_type=None, page_table=None,
                    causal=True, window=0, softcap=0.0, scale=None, sinks=None, alibi_slopes=None,
                    mask=None, kernel=None, exclude=(), n_threads=0, q_offsets=None,
                    max_q_tokens=None, k_scale=1.0, v_scale=1.0):
        """Ragged (q_offsets given): max_q_tokens, the most queries of any sequence, defaults
        to the offsets' largest step on the CPU (read on the host); on CUDA it must be given
        (reading device offsets would synchronize)."""
        qt = view(q, "q")
        offsets = optional_view(q_offsets, "q_offsets")
        if offsets is not None and max_q_tokens is None:
            max_q_tokens = _max_step(offsets)
        p = _shape_problem(qt, view(k_cache, "k_cache"), view(v_cache, "v_cache"),
                           optional_view(page_table, "page_table"), k_type, v_type, None,
                           offsets, max_q_tokens)
        _set_features(p, causal, window, softcap, scale, sinks is not None,
                      alibi_slopes is not None, mask is not None, k_scale, v_scale)
        plan = cls.__new__(cls)
        plan._make(p, qt.device, kernel, exclude, n_threads)
        return plan

    def _make(self, problem, device, kernel, exclude, n_threads):
        self.device = device
        with _on_device(device):
            self._native = _kvflash.plan(problem, _backend(device), kernel or "", list(exclude),
                                         n_threads, True)
        self._problem = self._native.problem  # a copy, read by the checks
        p = self._problem
        size = self._native.workspace_bytes
        if device == "cpu":
            self._workspace = np.empty(size, np.uint8) if size else None
            self._workspace_addr = self._workspace.ctypes.data if size else 0
            index, current_device, current_stream = -1, None, None
        else:
            import torch
            self._workspace = torch.empty(size, dtype=torch.uint8, device=device)
            self._workspace_addr = self._workspace.data_ptr()
            index = torch.device(device).index
            current_device = torch.cuda.current_device
            raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # torch >= 2.0
            current_stream = raw or (lambda i: torch.cuda.current_stream(i).cuda_stream)
        self._runner = _kvflash.Runner(self._native, self._workspace_addr, _tensor_type(), index,
                                       current_device, current_stream)
        self._try_run = self._runner.try_run
        # What run() allocates when out / lse are not given: (q_heads, head_dim_v) rows.
        self._out_shape = (p.n_seqs, p.n_q_tokens, p.n_q_heads, p.head_dim_v)
        self._lse_shape = self._out_shape[:-1]

    problem = property(lambda self: self._native.problem)
    kernel = property(lambda self: self._native.kernel)
    backend = property(lambda self: self._native.backend)
    workspace_bytes = property(lambda self: self._native.workspace_bytes)

    def __repr__(self):
        return f"Plan({self.kernel} on {self.device}: {self.problem!r})"

    def run(self, q, k_cache, v_cache, kv_lens=None, *, page_table=None, sinks=None,
            alibi_slopes=None, mask=None, out=None, lse=None, return_lse=False, q_offsets=None):
        """Attention of q over the caches into out (float32 (batch, q_tokens, q_heads,
        head_dim_v), allocated when None); with return_lse (or an lse given), returns (out, lse).
        Ragged plans (ragged=True): q (total, q_heads, head_dim), out (total, q_heads,
        head_dim_v), lse (total, q_heads), q_offsets (batch + 1,) int32.
        """
        if out is None:
            out = self._empty(q, self._out_shape)
        if lse is None and return_lse:
            lse = self._empty(q, self._lse_shape)
        # The fast path: arguments with the signatures the checks accepted last time.
        if not self._try_run(q, k_cache, v_cache, kv_lens, page_table, sinks, alibi_slopes, mask,
                             out, lse, q_offsets):
            self._run_checked(q, k_cache, v_cache, kv_lens, page_table, sinks, alibi_slopes,
                              mask, out, lse, q_offsets)
        return out if lse is None else (out, lse)

    def _empty(self, q, shape):
        """A new float32 array or tensor for out / lse, of q's kind on the plan's device (None
        when q is neither, which the checks then name)."""
        if self._problem.ragged_q:
            try:
                shape = (int(q.shape[0]),) + shape[2:]
            except (AttributeError, IndexError, TypeError):
                return None
        if isinstance(q, np.ndarray):
            return np.empty(shape, np.float32)
        torch = _torch()
        if torch is not None and isinstance(q, torch.Tensor):
            return torch.empty(shape, dtype=torch.float32, device=self.device)
        return None

    def _run_checked(self, *args):
        """The first call with these tensors' signatures (or a call that differs): every check,
        naming the argument; then the runner remembers the signatures for the fast path."""
        p = self._problem
        names = ("q", "k_cache", "v_cache", "kv_lens", "page_table", "sinks", "alibi_slopes",
                 "mask", "out", "lse", "q_offsets")
        self._runner.forget()
        t = {name: optional_view(x, name) for name, x in zip(names, args)}
        self._check_shapes(t)
        if t["out"] is None:  # q passed the checks, so run() could have allocated it
            raise TypeError("out: expected a NumPy array or a torch tensor")
        self._check_optional(t)
        for x in t.values():
            if x is not None:
                require_device(x, self.device, "the plan's device")
        nt = self._native_tensors(t)
        packed_rows = t["q"].shape[0] if p.ragged_q else 0
        self._runner.remember(*args, nt, packed_rows, _tensor_type())
        with _on_device(self.device):
            self._runner.run(nt, self._stream())

    def _check_shapes(self, t):
        p = self._problem
        if (t["page_table"] is not None) != (p.page_size > 0):
            raise ValueError("page_table: " + ("the plan is paged, pass one" if p.page_size else
                                               "given to a plan of contiguous caches"))
        if (t["q_offsets"] is not None) != p.ragged_q:
            raise ValueError("q_offsets: " + ("the plan is ragged, pass them" if p.ragged_q else
                                              "given to a plan that is not ragged"))
        got = _shape_problem(t["q"], t["k_cache"], t["v_cache"], t["page_table"], p.k_type,
                             p.v_type, p.head_dim_v, t["q_offsets"], p.n_q_tokens)
        for field, arg in _FIELD_ARGUMENT.items():
            if getattr(got, field) != getattr(p, field):
                if field == "kv_capacity" and p.page_size:
                    arg = "page_table"  # pages per sequence x page size
                if field == "n_seqs" and p.ragged_q:
                    arg = "q_offsets"  # its length - 1
                raise ValueError(f"{arg}: gives {field}={getattr(got, field)}, the plan has "
                                 f"{getattr(p, field)}")
        require_dtype(t["q"], "float32")
        require_contiguous(t["q"])

    def _check_optional(self, t):
        p = self._problem
        rows = (t["q"].shape[0],) if p.ragged_q else (p.n_seqs, p.n_q_tokens)  # of q, out, lse
        float_tensors = {
            "out": rows + (p.n_q_heads, p.head_dim_v), "lse": rows + (p.n_q_heads,),
            "sinks": (p.n_q_heads,), "alibi_slopes": (p.n_q_heads,)}
        for name, shape in float_tensors.items():
            if t[name] is not None:
                require_dtype(t[name], "float32")
                require_shape(t[name], shape)
                require_contiguous(t[name])
        for name in ("out", "lse"):
            if t[name] is not None:
                require_writeable(t[name])
        for name, flag in (("sinks", p.has_sinks), ("alibi_slopes", p.has_alibi),
                           ("mask", p.has_mask)):
            if (t[name] is not None) != flag:
                raise ValueError(f"{name}: " + ("the plan has them, pass them" if flag else
                                                "given to a plan without them"))
        if t["kv_lens"] is not None:
            require_dtype(t["kv_lens"], "int64")
            require_shape(t["kv_lens"], (p.n_seqs,), " (batch)")
            require_contiguous(t["kv_lens"])
        if t["page_table"] is not None:
            require_dtype(t["page_table"], "int32")
            require_contiguous(t["page_table"])
        if t["q_offsets"] is not None:
            require_dtype(t["q_offsets"], "int32")
            require_contiguous(t["q_offsets"])
            # The offsets' rules bound the packed rows by batch x q_tokens. Host offsets are read
            # and held to the rows given on every call (the runner); device offsets cannot be
            # read without a sync, so the rows must cover that bound.
            if self.device != "cpu" and rows[0] < p.n_seqs * p.n_q_tokens:
                raise ValueError(f"q: {rows[0]} rows; a CUDA plan's packed q / out / lse need "
                                 f"batch x q_tokens = {p.n_seqs * p.n_q_tokens} (offsets on the "
                                 "device are not read on the host)")
        if t["mask"] is not None:
            m = t["mask"]
            require_dtype(m, "float32")
            require_shape(m, (p.n_seqs, p.n_q_tokens, None), " (batch, q_tokens, >= capacity)")
            require_last_dim_contiguous(m)
            if m.shape[2] < p.kv_capacity:
                raise ValueError(f"mask: {m.shape[2]} columns, fewer than the capacity "
                                 f"{p.kv_capacity}")
            if p.n_seqs > 1 and p.n_q_tokens > 1 and m.strides[0] != p.n_q_tokens * m.strides[1]:
                raise ValueError(f"mask: strides {m.strides}: rows must be evenly spaced (the "
                                 "library's mask_stride)")

    def _native_tensors(self, t):
        p = self._problem
        nt = _kvflash.Tensors()
        nt.q = t["q"].addr
        nt.k = _kv_tensor(t["k_cache"], t["page_table"])
        nt.v = _kv_tensor(t["v_cache"], t["page_table"])
        for name in ("kv_lens", "mask", "sinks", "alibi_slopes", "out", "lse", "q_offsets"):
            if t[name] is not None:
                setattr(nt, name, t[name].addr)
        if t["mask"] is not None:
            m = t["mask"]
            nt.mask_stride = (m.strides[1] if p.n_q_tokens > 1 else
                              m.strides[0] if p.n_seqs > 1 else m.shape[2])
        return nt

    def _stream(self):
        if self.device == "cpu":
            return 0
        # Untested on a GPU so far: torch's current stream of the plan's device, never synced.
        import torch
        return torch.cuda.current_stream().cuda_stream


def _kv_tensor(t, page_table):
    kv = _kvflash.KvTensor()
    kv.data = t.addr
    first, kv.stride_token, kv.stride_head = t.byte_strides[:3]
    if page_table is None:
        kv.stride_seq = first
    else:
        kv.stride_page, kv.n_pages = first, t.shape[0]
        kv.page_table, kv.pages_per_seq = page_table.addr, page_table.shape[1]
    return kv


# kvflash.attention's plans, per thread (a plan serves one call at a time), by what fixes the
# problem: the shapes and dtypes (and devices) of q, the caches, the page table and the ragged
# offsets, which optional tensors are given, and the other arguments. A cached plan is planned
# once (the KVFLASH_* variables are read then) and its run() checks every call's tensors as a
# Plan's does. At most _CACHED_PLANS a thread, the oldest dropped first.
_local = threading.local()
_CACHED_PLANS = 16


def _shape_key(x):
    if x is None:
        return None
    if isinstance(x, np.ndarray):
        return x.shape, x.dtype
    return x.shape, x.dtype, x.device  # a torch tensor (else AttributeError: no key)


def _plan_key(q, k, v, page_table, q_offsets, max_q_tokens, sinks, alibi, mask, *scalars):
    if q_offsets is not None and max_q_tokens is None:
        return None  # the problem depends on the offsets' values
    try:
        key = (_shape_key(q), _shape_key(k), _shape_key(v), _shape_key(page_table),
               _shape_key(q_offsets), max_q_tokens, sinks is None, alibi is None, mask is None,
               scalars)
        hash(key)
    except (AttributeError, TypeError):
        return None  # not arrays or tensors, or unhashable arguments: planned and checked
    return key


# torch.compile's "tracing now" test once kvflash.ops has registered the torch custom ops.
_compiling = lambda: False  # noqa: E731


def attention(q, k_cache, v_cache, kv_lens=None, *, k_type=None, v_type=None, page_table=None,
              causal=True, window=0, softcap=0.0, sinks=None, alibi_slopes=None, mask=None,
              scale=None, out=None, return_lse=False, kernel=None, q_offsets=None,
              max_q_tokens=None, k_scale=1.0, v_scale=1.0):
    """One call: plans the problem the tensors describe, then runs it (a decode loop keeps a Plan
    instead). Returns out, or (out, lse) with return_lse. Ragged batches: q packed (total,
    q_heads, head_dim) and q_offsets (batch + 1,) int32 (see Plan.for_tensors). While
    torch.compile traces (after `import kvflash.ops`), the call is the custom op's."""
    if _compiling():
        import torch
        op = torch.ops.kvflash.attention_lse if return_lse else torch.ops.kvflash.attention
        result = op(q, k_cache, v_cache, kv_lens, k_type=k_type, v_type=v_type,
                    page_table=page_table, causal=causal, window=window, softcap=softcap,
                    sinks=sinks, alibi_slopes=alibi_slopes, mask=mask, scale=scale,
                    kernel=kernel, q_offsets=q_offsets, q_tokens=max_q_tokens,
                    k_scale=k_scale, v_scale=v_scale)
        if out is None:
            return result
        if return_lse:
            out.copy_(result[0])
            return out, result[1]
        return out.copy_(result)
    return _attention(q, k_cache, v_cache, kv_lens, k_type=k_type, v_type=v_type,
                      page_table=page_table, causal=causal, window=window, softcap=softcap,
                      sinks=sinks, alibi_slopes=alibi_slopes, mask=mask, scale=scale, out=out,
                      return_lse=return_lse, kernel=kernel, q_offsets=q_offsets,
                      max_q_tokens=max_q_tokens, k_scale=k_scale, v_scale=v_scale)


def _attention(q, k_cache, v_cache, kv_lens=None, *, k_type=None, v_type=None, page_table=None,
               causal=True, window=0, softcap=0.0, sinks=None, alibi_slopes=None, mask=None,
               scale=None, out=None, return_lse=False, kernel=None, q_offsets=None,
               max_q_tokens=None, k_scale=1.0, v_scale=1.0):
    """attention() when torch.compile is not tracing: plan (or take this thread's plan of the
    same problem), then run."""
    key = _plan_key(q, k_cache, v_cache, page_table, q_offsets, max_q_tokens, sinks,
                    alibi_slopes, mask, k_type, v_type, causal, window, softcap, scale, kernel,
                    k_scale, v_scale)
    plans = getattr(_local, "plans", None)
    if plans is None:
        plans = _local.plans = {}
    plan = plans.get(key) if key is not None else None
    if plan is None:
        plan = Plan.for_tensors(q, k_cache, v_cache, k_type=k_type, v_type=v_type,
                                page_table=page_table, causal=causal, window=window,
                                softcap=softcap, scale=scale, sinks=sinks,
                                alibi_slopes=alibi_slopes, mask=mask, kernel=kernel,
                                q_offsets=q_offsets, max_q_tokens=max_q_tokens,
                                k_scale=k_scale, v_scale=v_scale)
        if key is not None:
            if len(plans) >= _CACHED_PLANS:
                del plans[next(iter(plans))]  # the oldest
            plans[key] = plan
            if plan.device != "cpu":
                plan._workspace, plan._workspace_addr = None, 0  # one per call, below
    if plan.device != "cpu" and key is not None:
        # Calls on different streams must not share a workspace: a new one per call from torch's
        # allocator, which hands its memory to another call only in stream order.
        import torch
        workspace = torch.empty(plan.workspace_bytes, dtype=torch.uint8, device=plan.device)
        plan._runner.set_workspace(workspace.data_ptr())
    return plan.run(q, k_cache, v_cache, kv_lens, page_table=page_table, sinks=sinks,
                    alibi_slopes=alibi_slopes, mask=mask, out=out, return_lse=return_lse,
                    q_offsets=q_offsets)
