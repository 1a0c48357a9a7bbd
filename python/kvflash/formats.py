"""KV formats from Python: quantize and dequantize rows, byte for byte the library's
(kvflash::quantize_rows / dequantize_row), and what each type costs."""

from . import _kvflash
from ._tensors import (empty, require_contiguous, require_dtype, rows, view)

type_info = _kvflash.type_info  # name, block_values, block_bytes, code_bits, rotated
row_size = _kvflash.row_size  # bytes of one row of n values, padding included
supported_space = _kvflash.supported_space


def kv_types():
    """The KV type names, e.g. ["f32", "f16", "bf16", "q8_0", ...]."""
    return list(supported_space()["kv_types"])


def _require_rows(t):
    require_contiguous(t)
    if not t.shape or t.shape[-1] == 0:
        raise ValueError(f"{t.name}: shape {t.shape} has no rows of values (expected (..., n), "
                         "n >= 1)")


def _rows(t, tensor, fn, *args):
    """The library's row function `fn` on the host, or its cuda_ twin on the tensor's device and
    current stream."""
    if t.device == "cpu":
        getattr(_kvflash, fn)(*args)
        return
    import torch
    with torch.cuda.device(tensor.device):
        getattr(_kvflash, "cuda_" + fn)(*args, torch.cuda.current_stream().cuda_stream)


def quantize(x, kv_type):
    """float32 (..., n) -> uint8 (..., row_size(kv_type, n)): each row of n values as the
    library stores it. NumPy or torch, CPU or (torch) CUDA, on the current stream."""
    t = view(x, "x")
    require_dtype(t, "float32")
    _require_rows(t)
    n = t.shape[-1]
    out = empty(t, t.shape[:-1] + (row_size(kv_type, n),), "uint8")
    if rows(t) == 0:
        return out
    _rows(t, x, "quantize_rows", kv_type, t.addr, rows(t), n, view(out, "out").addr)
    return out


def dequantize(data, kv_type, n):
    """uint8 (..., row_size(kv_type, n)) -> float32 (..., n): rows back to values in the original
    domain (turbo types inverse-rotated). n is needed: the padding makes bytes ambiguous (turbo
    rows of 64 and 128 values have the same size). NumPy or torch, CPU or (torch) CUDA, on the
    current stream."""
    t = view(data, "data")
    require_dtype(t, "uint8")
    _require_rows(t)
    want = row_size(kv_type, n)
    if t.shape[-1] != want:
        raise ValueError(f"data: rows of {t.shape[-1]} bytes, expected {want} (row_size of "
                         f"{kv_type} for {n} values)")
    out = empty(t, t.shape[:-1] + (n,), "float32")
    if rows(t) == 0:
        return out
    _rows(t, data, "dequantize_rows", kv_type, t.addr, rows(t), n, view(out, "out").addr)
    return out
