"""A GGUF (version 3) writer for the project's own models, in plain Python.

The same layout as tools/run/gguf.cpp's write_gguf (the C++ reader checks what this writes):
magic, version, tensor and metadata counts, the metadata (typed key/value pairs, arrays of
scalars or strings), the tensor table (name, dims with ne[0] first, ggml type, offset into the
data section), then the data section at the next multiple of the alignment, each tensor's bytes
at an aligned offset.
"""

import struct

GGUF_MAGIC = 0x46554747  # "GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32

# Metadata value types.
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
_SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
           BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}

# ggml tensor types this writer emits, with (values, bytes) per block.
GGML_F32, GGML_F16, GGML_Q8_0, GGML_BF16 = 0, 1, 8, 30
_BLOCK = {GGML_F32: (1, 4), GGML_F16: (1, 2), GGML_Q8_0: (32, 34), GGML_BF16: (1, 2)}


def _string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(vtype, value):
    if vtype == STRING:
        return _string(value)
    if vtype == ARRAY:
        etype, items = value
        out = struct.pack("<IQ", etype, len(items))
        return out + b"".join(_value(etype, x) for x in items)
    return struct.pack(_SCALAR[vtype], value)


def write(path, metadata, tensors, alignment=ALIGNMENT):
    """metadata: [(key, vtype, value)] (ARRAY values: (element vtype, [items]));
    tensors: [(name, dims with ne[0] first, ggml type, bytes)]."""
    if alignment & (alignment - 1):
        raise ValueError(f"alignment {alignment} is not a power of two")
    names = set()
    for name, dims, gtype, data in tensors:
        if name in names:
            raise ValueError(f"tensor '{name}' appears twice")
        names.add(name)
        values, block_bytes = _BLOCK[gtype]
        count = 1
        for d in dims:
            count *= d
        if dims[0] % values or count // values * block_bytes != len(data):
            raise ValueError(f"tensor '{name}': {len(data)} bytes do not hold dims {dims}")
    meta = list(metadata)
    if alignment != ALIGNMENT and not any(k == "general.alignment" for k, _, _ in meta):
        meta.append(("general.alignment", U32, alignment))
    out = bytearray(struct.pack("<IIQQ", GGUF_MAGIC, GGUF_VERSION, len(tensors), len(meta)))
    for key, vtype, value in meta:
        out += _string(key) + struct.pack("<I", vtype) + _value(vtype, value)
    offsets, offset = [], 0
    for name, dims, gtype, data in tensors:
        out += _string(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", gtype, offset)
        offsets.append(offset)
        offset = (offset + len(data) + alignment - 1) // alignment * alignment
    start = (len(out) + alignment - 1) // alignment * alignment
    out += bytes(start - len(out))
    for (name, dims, gtype, data), off in zip(tensors, offsets):
        out += bytes(start + off - len(out))
        out += data
    with open(path, "wb") as f:
        f.write(out)
