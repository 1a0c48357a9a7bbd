"""kvflash from Python: attention over compressed KV caches (docs/python.md).

    import kvflash
    k_bytes = kvflash.quantize(k, "q8_0")          # float32 (..., head_dim) -> uint8 rows
    out = kvflash.attention(q, k_bytes, v_bytes, kv_lens, k_type="q8_0", v_type="q8_0")
    import kvflash.ops                             # torch.ops.kvflash.attention (torch.compile)
"""

from ._kvflash import __version__, cuda_device_count, kernels
from .attention import Plan, attention
from .formats import dequantize, kv_types, quantize, row_size, supported_space, type_info

__all__ = ["Plan", "attention", "cuda_device_count", "dequantize", "kernels", "kv_types",
           "quantize", "row_size", "supported_space", "type_info", "__version__"]
