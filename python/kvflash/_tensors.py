"""What the package needs of a NumPy array or a torch tensor, read off it once (address, shape,
element strides, dtype, device), and the checks that name the argument when one does not fit.

The native module takes addresses; everything that passes these checks lies inside its tensor,
which is what keeps a wrong argument from reading or writing outside it. The library checks the
rest (strides, alignment, lengths, the supported space) and says so in its own messages.
"""

import math
import sys
from typing import NamedTuple

import numpy as np


class Tensor(NamedTuple):
    obj: object  # the array or tensor itself (the caller keeps it alive during the call)
    name: str  # the argument's name, for messages
    addr: int
    shape: tuple
    strides: tuple  # in elements
    itemsize: int
    dtype: str  # "float32", "float16", "bfloat16", "uint8", "int32", "int64", ...
    device: str  # "cpu" or "cuda:N"
    is_torch: bool

    @property
    def byte_strides(self):
        return tuple(s * self.itemsize for s in self.strides)


def is_torch(x):
    torch = sys.modules.get("torch")  # never imported here: NumPy users need no torch
    return torch is not None and isinstance(x, torch.Tensor)


def view(x, name):
    if is_torch(x):
        dev = x.device
        device = dev.type if dev.index is None else f"{dev.type}:{dev.index}"
        return Tensor(x, name, x.data_ptr(), tuple(x.shape), tuple(x.stride()), x.element_size(),
                      str(x.dtype).replace("torch.", ""), device, True)
    if isinstance(x, np.ndarray):
        if not x.dtype.isnative:
            raise TypeError(f"{name}: dtype {x.dtype.str} is not in the machine's byte order")
        if any(s % x.itemsize for s in x.strides):
            raise ValueError(f"{name}: strides {x.strides} (bytes) are not whole elements")
        return Tensor(x, name, x.__array_interface__["data"][0], tuple(x.shape),
                      tuple(s // x.itemsize for s in x.strides), x.itemsize, x.dtype.name, "cpu",
                      False)
    raise TypeError(f"{name}: expected a NumPy array or a torch tensor, got {type(x).__name__}")


def optional_view(x, name):
    return None if x is None else view(x, name)


def require_dtype(t, *dtypes):
    if t.dtype not in dtypes:
        raise TypeError(f"{t.name}: dtype {t.dtype}, expected {' or '.join(dtypes)}")


def require_shape(t, shape, what=""):
    """shape: ints, None for any extent. `what` says what the expected shape is made of."""
    if len(t.shape) != len(shape) or any(e is not None and e != s for s, e in zip(t.shape, shape)):
        want = ", ".join("*" if e is None else str(e) for e in shape)
        raise ValueError(f"{t.name}: shape {t.shape}, expected ({want}){what}")


def require_ndim(t, ndim, what):
    if len(t.shape) != ndim:
        raise ValueError(f"{t.name}: {len(t.shape)} dimensions {t.shape}, expected {what}")


def contiguous_strides(shape):
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


def require_contiguous(t):
    want = contiguous_strides(t.shape)
    if math.prod(t.shape) == 0:
        return  # nothing to read or write
    # A dimension of extent 1 is never stepped over: its stride does not matter.
    if any(n > 1 and s != w for n, s, w in zip(t.shape, t.strides, want)):
        raise ValueError(f"{t.name}: strides {t.strides} are not contiguous (expected {want}); "
                         "pass a contiguous copy")


def require_last_dim_contiguous(t):
    if t.shape and t.shape[-1] > 1 and t.strides[-1] != 1:
        raise ValueError(f"{t.name}: the last dimension has stride {t.strides[-1]}, expected 1 "
                         "(rows must be contiguous)")


def require_writeable(t):
    if not t.is_torch and not t.obj.flags.writeable:
        raise ValueError(f"{t.name}: a read-only array (the result is written into it)")


def require_device(t, device, why):
    if t.device != device:
        raise ValueError(f"{t.name}: on {t.device}, expected {device} ({why})")


def rows(t):
    """Rows of the last dimension: the product of the others."""
    return math.prod(t.shape[:-1])


def empty(like, shape, dtype):
    """A new array or tensor of `like`'s kind and device."""
    if like.is_torch:
        import torch
        return torch.empty(shape, dtype=getattr(torch, dtype), device=like.obj.device)
    return np.empty(shape, dtype=dtype)
