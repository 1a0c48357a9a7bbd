"""The library's C API (kvflash.h) through ctypes: a path to the C++ library that does not go
through the package, so that the tests can check the package bit for bit against it. The structs
mirror kvflash.h field for field. KVFLASH_LIBRARY names libkvflash.so (CTest sets it)."""

import ctypes as C
import os

import numpy as np
import pytest

_TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "turbo2", "turbo3", "turbo4", "fp8_e4m3", "fp8_e5m2"]


class HeadDims(C.Structure):
    _fields_ = [("k", C.c_int32), ("v", C.c_int32)]


class Problem(C.Structure):
    _fields_ = [("n_seqs", C.c_int32), ("n_q_tokens", C.c_int32), ("n_q_heads", C.c_int32),
                ("n_kv_heads", C.c_int32), ("head_dim", HeadDims), ("k_type", C.c_int32),
                ("v_type", C.c_int32), ("kv_capacity", C.c_int64), ("scale", C.c_float),
                ("causal", C.c_int32), ("has_mask", C.c_int32), ("window", C.c_int64),
                ("softcap", C.c_float), ("has_sinks", C.c_int32), ("has_alibi", C.c_int32),
                ("page_size", C.c_int32), ("ragged_q", C.c_int32),
                ("k_scale", C.c_float), ("v_scale", C.c_float)]


class KvTensor(C.Structure):
    _fields_ = [("data", C.c_void_p), ("stride_token", C.c_int64), ("stride_head", C.c_int64),
                ("stride_seq", C.c_int64), ("page_table", C.c_void_p),
                ("pages_per_seq", C.c_int32), ("n_pages", C.c_int64), ("stride_page", C.c_int64)]


class Tensors(C.Structure):
    _fields_ = [("q", C.c_void_p), ("k", KvTensor), ("v", KvTensor), ("kv_lens", C.c_void_p),
                ("mask", C.c_void_p), ("mask_stride", C.c_int64), ("sinks", C.c_void_p),
                ("alibi_slopes", C.c_void_p), ("out", C.c_void_p), ("lse", C.c_void_p),
                ("q_offsets", C.c_void_p)]


class Options(C.Structure):
    _fields_ = [("backend", C.c_int32), ("force_kernel", C.c_char_p),
                ("exclude_kernels", C.c_char_p), ("n_threads", C.c_int32),
                ("ignore_environment", C.c_int32), ("parallel_for", C.c_void_p),
                ("parallel_for_user", C.c_void_p), ("parallel_for_threads", C.c_int32),
                ("spin_us", C.c_int32)]


def library():
    path = os.environ.get("KVFLASH_LIBRARY")
    if not path:
        pytest.skip("KVFLASH_LIBRARY (libkvflash.so) not set: no C API to compare with")
    lib = C.CDLL(path)
    lib.kvflash_last_error.restype = C.c_char_p
    lib.kvflash_row_size.restype = C.c_size_t
    lib.kvflash_row_size.argtypes = [C.c_int32, C.c_int64]
    lib.kvflash_quantize.argtypes = [C.c_int32, C.c_void_p, C.c_int64, C.c_void_p]
    lib.kvflash_dequantize.argtypes = [C.c_int32, C.c_void_p, C.c_int64, C.c_void_p]
    lib.kvflash_attention.argtypes = [C.POINTER(Problem), C.POINTER(Tensors), C.POINTER(Options)]
    return lib


def _check(lib, status):
    assert status == 0, lib.kvflash_last_error().decode()


def quantize(x, kv_type):
    """float32 (rows, n) -> uint8 (rows, row_size), one kvflash_quantize per row."""
    lib = library()
    x = np.ascontiguousarray(x, np.float32).reshape(-1, x.shape[-1])
    t = _TYPES.index(kv_type)
    out = np.zeros((x.shape[0], lib.kvflash_row_size(t, x.shape[1])), np.uint8)
    for r in range(x.shape[0]):
        _check(lib, lib.kvflash_quantize(t, x[r].ctypes.data, x.shape[1], out[r].ctypes.data))
    return out


def dequantize(data, kv_type, n):
    lib = library()
    data = np.ascontiguousarray(data).reshape(-1, data.shape[-1])
    out = np.zeros((data.shape[0], n), np.float32)
    for r in range(data.shape[0]):
        _check(lib, lib.kvflash_dequantize(_TYPES.index(kv_type), data[r].ctypes.data, n,
                                           out[r].ctypes.data))
    return out


def _kv(a, page_table):
    """A (seq or page, token, head, row) NumPy array's layout, as the package passes it."""
    kv = KvTensor(data=a.ctypes.data)
    first, kv.stride_token, kv.stride_head = a.strides[:3]
    if page_table is None:
        kv.stride_seq = first
    else:
        kv.stride_page, kv.n_pages = first, a.shape[0]
        kv.page_table, kv.pages_per_seq = page_table.ctypes.data, page_table.shape[1]
    return kv


def attention(q, k, v, k_type, v_type, kv_lens=None, page_table=None, causal=True, window=0,
              softcap=0.0, scale=None, sinks=None, alibi_slopes=None, mask=None, kernel=None,
              q_offsets=None, max_q_tokens=None, k_scale=1.0, v_scale=1.0):
    """kvflash_attention on NumPy arrays: q (batch, q_tokens, q_heads, dk) float32, caches as
    the package takes them (float32 for f32, uint8 bytes otherwise). Ragged: q (total, q_heads,
    dk) and q_offsets (batch + 1,) int32; out and lse are packed the same way."""
    lib = library()
    if q_offsets is None:
        b, t, h, dk = q.shape
        rows = (b, t)
    else:
        (total, h, dk), b, t = q.shape, len(q_offsets) - 1, max_q_tokens
        rows = (total,)
    dv = v.shape[-1] if v.dtype == np.float32 else {192: 128, 576: 512}.get(dk, dk)
    p = Problem(n_seqs=b, n_q_tokens=t, n_q_heads=h, n_kv_heads=k.shape[2],
                head_dim=HeadDims(dk, dv), k_type=_TYPES.index(k_type),
                v_type=_TYPES.index(v_type), scale=scale or 0.0, causal=int(causal),
                has_mask=mask is not None, window=window, softcap=softcap,
                has_sinks=sinks is not None, has_alibi=alibi_slopes is not None,
                ragged_q=int(q_offsets is not None), k_scale=k_scale, v_scale=v_scale)
    if page_table is None:
        p.kv_capacity = k.shape[1]
    else:
        p.page_size, p.kv_capacity = k.shape[1], page_table.shape[1] * k.shape[1]
    out = np.zeros(rows + (h, dv), np.float32)
    lse = np.zeros(rows + (h,), np.float32)
    ts = Tensors(q=q.ctypes.data, k=_kv(k, page_table), v=_kv(v, page_table), out=out.ctypes.data,
                 lse=lse.ctypes.data)
    for name, a in (("kv_lens", kv_lens), ("sinks", sinks), ("alibi_slopes", alibi_slopes),
                    ("mask", mask), ("q_offsets", q_offsets)):
        if a is not None:
            setattr(ts, name, a.ctypes.data)
    if mask is not None:
        ts.mask_stride = mask.shape[2]
    opt = Options(force_kernel=kernel.encode() if kernel else None)
    _check(lib, lib.kvflash_attention(C.byref(p), C.byref(ts), C.byref(opt)))
    return out, lse
