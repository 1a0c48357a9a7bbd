"""Formats from Python: the same bytes and values as the library's C API, on NumPy arrays and
torch tensors, and the type table."""

import numpy as np
import pytest

import capi
import kvflash

TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "turbo2", "turbo3", "turbo4", "fp8_e4m3", "fp8_e5m2"]


def rows(n_rows, n, seed=0):
    x = np.random.default_rng(seed).standard_normal((n_rows, n)).astype(np.float32)
    x[0, :3] = [0.0, 70000.0, -1e-8]  # a clipped fp16 scale and a subnormal in one row
    return x


def test_type_table():
    assert kvflash.kv_types() == TYPES
    assert kvflash.type_info("q8_0") == {"name": "q8_0", "block_values": 32, "block_bytes": 34,
                                         "code_bits": 8, "rotated": False}
    assert kvflash.row_size("q8_0", 128) == 136
    assert kvflash.row_size("q8_0", 80) == 3 * 34  # the last block zero-padded
    assert kvflash.row_size("turbo3", 64) == kvflash.row_size("turbo3", 128) == 50
    space = kvflash.supported_space()
    assert (576, 512) in space["head_dims"] and space["max_q_heads"] == 1024


@pytest.mark.parametrize("kv_type", TYPES)
@pytest.mark.parametrize("n", [64, 80, 128, 576])
def test_quantize_matches_the_library(kv_type, n):
    x = rows(5, n).reshape(5, 1, n)
    q = kvflash.quantize(x, kv_type)
    assert q.dtype == np.uint8 and q.shape == (5, 1, kvflash.row_size(kv_type, n))
    assert np.array_equal(q.reshape(5, -1), capi.quantize(x.reshape(5, n), kv_type))
    back = kvflash.dequantize(q, kv_type, n)
    assert back.shape == (5, 1, n)
    assert np.array_equal(back.reshape(5, n), capi.dequantize(q.reshape(5, -1), kv_type, n))


@pytest.mark.parametrize("kv_type", TYPES)
def test_torch_tensors_give_numpy_bytes(kv_type):
    torch = pytest.importorskip("torch")
    x = rows(4, 128)
    q = kvflash.quantize(torch.from_numpy(x), kv_type)
    assert isinstance(q, torch.Tensor) and q.dtype == torch.uint8
    assert np.array_equal(q.numpy(), kvflash.quantize(x, kv_type))
    back = kvflash.dequantize(q, kv_type, 128)
    assert back.dtype == torch.float32
    assert np.array_equal(back.numpy(), kvflash.dequantize(q.numpy(), kv_type, 128))


def test_empty_batches_are_fine():
    assert kvflash.quantize(np.zeros((0, 128), np.float32), "q4_0").shape == (0, 72)


@pytest.mark.parametrize("bad, error, words", [
    (np.zeros((2, 128)), TypeError, "x: dtype float64, expected float32"),
    (np.zeros((128, 2), np.float32).T, ValueError, "x: strides"),
    (np.zeros((2, 0), np.float32), ValueError, "x: shape (2, 0)"),
    (np.float32(1.0), TypeError, "x: expected a NumPy array or a torch tensor"),
    ([1.0, 2.0], TypeError, "x: expected a NumPy array"),
])
def test_quantize_rejects_naming_the_argument(bad, error, words):
    with pytest.raises(error) as e:
        kvflash.quantize(bad, "q8_0")
    assert words in str(e.value)


def test_bad_type_names_list_the_types():
    with pytest.raises(ValueError, match="q8_0, q4_0"):
        kvflash.quantize(np.zeros((1, 32), np.float32), "q5_1")
    with pytest.raises(ValueError, match="data: rows of 10 bytes, expected 34"):
        kvflash.dequantize(np.zeros((1, 10), np.uint8), "q8_0", 32)


def test_misaligned_rows_are_refused():
    buf = np.zeros(1 + 4 * 32, np.uint8)
    x = buf[1:].view(np.uint8)  # odd address
    with pytest.raises(ValueError, match="misaligned"):
        kvflash.dequantize(x[:34].reshape(1, 34), "q8_0", 32)
