"""kvflash attention as torch custom ops, so that torch.compile traces a model that calls it
(one node in the graph, shapes from the fake implementation below) and torch.ops sees it:

    import kvflash.ops
    out = torch.ops.kvflash.attention(q, k_cache, v_cache, kv_lens, k_type="q8_0", v_type="q8_0")
    out, lse = torch.ops.kvflash.attention_lse(q, k_cache, v_cache, kv_lens, ...)

Importing this module registers them (torch.library: Library.define / impl, which torch 1.13
has; the shape function through torch.library.register_fake or impl_abstract where the
installed torch has one, else as the Meta kernel). kvflash.attention itself routes through the
op while torch.compile traces (torch >= 2), so a compiled model may call either.

The arguments are kvflash.attention's (docs/python.md) but for out= (an op returns new tensors),
return_lse (the second op) and max_q_tokens, which a ragged call on CUDA passes as q_tokens.
"""

import sys

import torch

from .attention import _default_v_head_dim, _FLOAT_KV_TYPES

# The module (kvflash.attention, the attribute, is its function).
_attention_module = sys.modules[__name__.rpartition(".")[0] + ".attention"]

NAMESPACE = "kvflash"
_ARGS = ("Tensor q, Tensor k_cache, Tensor v_cache, Tensor? kv_lens=None, *, str? k_type=None, "
         "str? v_type=None, Tensor? page_table=None, bool causal=True, int window=0, "
         "float softcap=0.0, Tensor? sinks=None, Tensor? alibi_slopes=None, Tensor? mask=None, "
         "float? scale=None, str? kernel=None, Tensor? q_offsets=None, int? q_tokens=None, "
         "float k_scale=1.0, float v_scale=1.0")
SCHEMAS = {"attention": f"attention({_ARGS}) -> Tensor",
           "attention_lse": f"attention_lse({_ARGS}) -> (Tensor, Tensor)"}


def _eager(q, k_cache, v_cache, kv_lens=None, *, k_type=None, v_type=None, page_table=None,
           causal=True, window=0, softcap=0.0, sinks=None, alibi_slopes=None, mask=None,
           scale=None, kernel=None, q_offsets=None, q_tokens=None, k_scale=1.0, v_scale=1.0):
    return _attention_module._attention(
        q, k_cache, v_cache, kv_lens, k_type=k_type, v_type=v_type, page_table=page_table,
        causal=causal, window=window, softcap=softcap, sinks=sinks, alibi_slopes=alibi_slopes,
        mask=mask, scale=scale, kernel=kernel, q_offsets=q_offsets, max_q_tokens=q_tokens,
        return_lse=True, k_scale=k_scale, v_scale=v_scale)


def _attention(*args, **kw):
    return _eager(*args, **kw)[0]


def _attention_lse(*args, **kw):
    out, lse = _eager(*args, **kw)
    return out, lse


def _head_dim_v(q, v_cache, v_type):
    """V's head dim as kvflash.attention derives it: a float cache's row, else K's partner."""
    head_dim = q.shape[-1]
    if str(v_cache.dtype).replace("torch.", "") in _FLOAT_KV_TYPES:
        return v_cache.shape[-1]
    return _default_v_head_dim(head_dim)


def _fake_lse(q, k_cache, v_cache, kv_lens=None, *, k_type=None, v_type=None, page_table=None,
              causal=True, window=0, softcap=0.0, sinks=None, alibi_slopes=None, mask=None,
              scale=None, kernel=None, q_offsets=None, q_tokens=None, k_scale=1.0, v_scale=1.0):
    """The outputs' shapes: out (rows, q_heads, head_dim_v), lse (rows, q_heads), rows (batch,
    q_tokens) or, ragged, (total,). The real call checks everything else."""
    rows = tuple(q.shape[:-2])
    out = q.new_empty(rows + (q.shape[-2], _head_dim_v(q, v_cache, v_type)),
                      dtype=torch.float32)
    return out, q.new_empty(rows + (q.shape[-2],), dtype=torch.float32)


def _fake(*args, **kw):
    return _fake_lse(*args, **kw)[0]


_library = None


def _register():
    global _library
    if _library is not None:
        return
    lib = torch.library.Library(NAMESPACE, "DEF")
    impls = {"attention": (_attention, _fake), "attention_lse": (_attention_lse, _fake_lse)}
    register_fake = (getattr(torch.library, "register_fake", None) or  # torch >= 2.4
                     getattr(torch.library, "impl_abstract", None))  # torch 2.2, 2.3
    for name, (impl, fake) in impls.items():
        lib.define(SCHEMAS[name])
        for key in ("CPU", "CUDA"):
            lib.impl(name, impl, key)
        if register_fake is not None:
            register_fake(f"{NAMESPACE}::{name}", fake, lib=lib)
        else:  # torch 1.x, 2.0, 2.1: the Meta kernel (AutogradMeta has no fallthrough in 1.13)
            lib.impl(name, fake, "Meta")
            lib.impl(name, fake, "AutogradMeta")
    _library = lib  # registrations last as long as the Library object
    _attention_module._compiling = _is_compiling()


def _is_compiling():
    """torch.compile's "am I tracing" test where the installed torch has one."""
    compiler = getattr(torch, "compiler", None)
    if compiler is not None and hasattr(compiler, "is_compiling"):  # torch >= 2.3
        return compiler.is_compiling
    try:
        from torch._dynamo import is_compiling  # torch 2.0 .. 2.2
        return is_compiling
    except ImportError:
        return lambda: False  # torch 1.x: nothing to trace through


_register()
attention = torch.ops.kvflash.attention
attention_lse = torch.ops.kvflash.attention_lse
