"""kvflash attention as torch custom ops (kvflash.ops): registered with the installed torch
(torch.library), callable through torch.ops with kvflash.attention's results, shapes from the
fake / meta implementation, and traced by torch.compile (torch >= 2 only)."""

import numpy as np
import pytest

import kvflash

torch = pytest.importorskip("torch")
import kvflash.ops  # noqa: E402  (registers torch.ops.kvflash.*)

H, HKV, D, CAP = 8, 2, 64, 32


def tensors(q_tokens=2, seed=0):
    rng = np.random.default_rng(seed)
    q = torch.from_numpy(rng.standard_normal((2, q_tokens, H, D)).astype(np.float32))
    kv = rng.standard_normal((2, 2, CAP, HKV, D)).astype(np.float32)
    k = torch.from_numpy(kvflash.quantize(kv[0], "q8_0"))
    v = torch.from_numpy(kvflash.quantize(kv[1], "turbo3"))
    lens = torch.tensor([CAP, CAP - 9])
    sinks = torch.from_numpy(rng.standard_normal(H).astype(np.float32))
    return q, k, v, lens, sinks


def test_the_ops_are_registered():
    assert torch.ops.kvflash.attention is kvflash.ops.attention
    assert callable(torch.ops.kvflash.attention.default)


def test_the_op_is_kvflash_attention():
    q, k, v, lens, sinks = tensors()
    kw = dict(k_type="q8_0", v_type="turbo3", causal=False, window=5, sinks=sinks)
    want_out, want_lse = kvflash.attention(q, k, v, lens, return_lse=True, **kw)
    out = torch.ops.kvflash.attention(q, k, v, lens, **kw)
    assert torch.equal(out, want_out)
    out, lse = torch.ops.kvflash.attention_lse(q, k, v, lens, **kw)
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse)


def test_errors_pass_through_the_op():
    q, k, v, lens, _ = tensors()
    with pytest.raises(TypeError, match="k_cache: uint8 bytes need k_type="):
        torch.ops.kvflash.attention(q, k, v, lens, v_type="turbo3")
    with pytest.raises(ValueError, match="kv_lens"):
        torch.ops.kvflash.attention(q, k, v, lens + 100, k_type="q8_0", v_type="turbo3")


def test_ragged_through_the_op():
    q, k, v, lens, _ = tensors()
    packed = q.reshape(-1, H, D)[:3].contiguous()
    offsets = torch.tensor([0, 2, 3], dtype=torch.int32)
    want = kvflash.attention(packed, k, v, lens, k_type="q8_0", v_type="turbo3",
                             q_offsets=offsets)
    got = torch.ops.kvflash.attention(packed, k, v, lens, k_type="q8_0", v_type="turbo3",
                                      q_offsets=offsets)
    assert torch.equal(got, want)


def test_shapes_on_meta_tensors():
    """The shape function: what torch.compile's fake tensors see (here through the Meta
    dispatch key, which every torch version has)."""
    q, k, v, lens, _ = tensors(q_tokens=3)
    f16_v = torch.empty((2, CAP, HKV, 32), dtype=torch.float16)
    meta = [x.to("meta") for x in (q, k, v, lens, f16_v)]
    out, lse = torch.ops.kvflash.attention_lse(*meta[:4], k_type="q8_0", v_type="turbo3")
    assert out.device.type == "meta" and out.shape == (2, 3, H, D) and out.dtype == torch.float32
    assert lse.shape == (2, 3, H)
    out = torch.ops.kvflash.attention(meta[0], meta[1], meta[4], meta[3], k_type="q8_0")
    assert out.shape == (2, 3, H, 32)
    packed = torch.empty((5, H, D), device="meta")
    out = torch.ops.kvflash.attention(packed, meta[1], meta[2], k_type="q8_0", v_type="turbo3",
                                      q_offsets=torch.empty(3, dtype=torch.int32, device="meta"))
    assert out.shape == (5, H, D)


@pytest.mark.skipif(not hasattr(torch, "compile"), reason="torch.compile needs torch >= 2")
@pytest.mark.parametrize("through", ["kvflash.attention", "torch.ops"])
def test_torch_compile_traces_a_layer_that_calls_it(through):
    q, k, v, lens, _ = tensors(q_tokens=1)
    proj = torch.nn.Linear(H * D, H * D)

    def layer(x):
        x = x * 2.0
        if through == "torch.ops":
            y = torch.ops.kvflash.attention(x, k, v, lens, k_type="q8_0", v_type="turbo3")
        else:
            y = kvflash.attention(x, k, v, lens, k_type="q8_0", v_type="turbo3")
        return proj(y.reshape(2, 1, H * D))

    compiled = torch.compile(layer, fullgraph=True, backend="eager")
    with torch.no_grad():
        assert torch.allclose(compiled(q), layer(q))
