"""The CUDA path (marked gpu: skipped without a CUDA device). Written without a GPU at hand and
first run on an H100 on 2026-12-06 (torch 2.11): all passed."""

import numpy as np
import pytest

import kvflash

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


def caches(kv_type, batch=2, capacity=256, kv_heads=2, head_dim=128, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, capacity, kv_heads, head_dim, generator=g)
    return kvflash.quantize(x, kv_type), kvflash.quantize(x.flip(1).contiguous(), kv_type)


@pytest.mark.parametrize("kv_type", ["f16", "q8_0", "q4_0", "turbo3"])
def test_quantize_on_the_device_gives_the_host_bytes(kv_type):
    x = torch.randn(64, 128)
    assert torch.equal(kvflash.quantize(x.cuda(), kv_type).cpu(), kvflash.quantize(x, kv_type))


@pytest.mark.parametrize("kv_type", kvflash.kv_types())
def test_dequantize_on_the_device_gives_the_host_floats(kv_type):
    data = kvflash.quantize(torch.randn(64, 100), kv_type)
    want = kvflash.dequantize(data, kv_type, 100)
    got = kvflash.dequantize(data.cuda(), kv_type, 100)
    assert got.device.type == "cuda"
    assert torch.equal(got.cpu(), want)


@pytest.mark.parametrize("q_tokens", [1, 16])
def test_cuda_attention_is_close_to_the_cpu(q_tokens):
    k, v = caches("q8_0")
    q = torch.randn(2, q_tokens, 8, 128)
    lens = torch.tensor([256, 200])
    want = kvflash.attention(q, k, v, lens, k_type="q8_0", v_type="q8_0")
    got = kvflash.attention(q.cuda(), k.cuda(), v.cuda(), lens.cuda(), k_type="q8_0",
                            v_type="q8_0")
    torch.cuda.synchronize()
    assert got.is_cuda
    assert torch.allclose(got.cpu(), want, atol=2e-3, rtol=2e-3)


def test_a_captured_decode_step_replays_at_growing_lengths():
    k, v = (x.cuda() for x in caches("q4_0", batch=1))
    plan = kvflash.Plan(q_heads=8, kv_heads=2, head_dim=128, kv_capacity=256, k_type="q4_0",
                        v_type="q4_0", device="cuda")
    q = torch.randn(1, 1, 8, 128, device="cuda")
    lens = torch.tensor([1], device="cuda")
    out = torch.empty(1, 1, 8, 128, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        plan.run(q, k, v, lens, out=out)  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        plan.run(q, k, v, lens, out=out)
    for n in (1, 100, 256):
        lens.fill_(n)
        graph.replay()
        want = kvflash.attention(q.cpu(), k.cpu(), v.cpu(), lens.cpu(), k_type="q4_0",
                                 v_type="q4_0")
        torch.cuda.synchronize()
        assert torch.allclose(out.cpu(), want, atol=2e-3, rtol=2e-3), n


def test_tensors_on_two_devices_are_refused():
    k, v = caches("q8_0")
    with pytest.raises(ValueError, match="k_cache: on cpu"):
        kvflash.attention(torch.randn(2, 1, 8, 128, device="cuda"), k, v.cuda(), k_type="q8_0",
                          v_type="q8_0")


def test_a_reused_plan_follows_the_current_stream():
    """The fast path (second call on) reads torch's current stream on every call."""
    k, v = (x.cuda() for x in caches("q8_0"))
    q = torch.randn(2, 1, 8, 128, device="cuda")
    lens = torch.tensor([256, 100], device="cuda")
    plan = kvflash.Plan.for_tensors(q, k, v, k_type="q8_0", v_type="q8_0")
    want = plan.run(q, k, v, lens)
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        outs = [plan.run(q, k, v, lens) for _ in range(3)]
    stream.synchronize()
    for out in outs:
        assert torch.equal(out, want)


def test_ragged_on_the_device_needs_padded_rows():
    k, v = (x.cuda() for x in caches("q8_0"))
    lens = torch.tensor([256, 200], device="cuda")
    q = torch.randn(2 * 4, 8, 128, device="cuda")  # batch x max_q_tokens rows
    offsets = torch.tensor([0, 3, 4], dtype=torch.int32, device="cuda")
    got = kvflash.attention(q, k, v, lens, k_type="q8_0", v_type="q8_0", q_offsets=offsets,
                            max_q_tokens=4)
    want = kvflash.attention(q.cpu()[:4], k.cpu(), v.cpu(), lens.cpu(), k_type="q8_0",
                             v_type="q8_0", q_offsets=offsets.cpu(), max_q_tokens=4)
    torch.cuda.synchronize()
    assert torch.allclose(got.cpu()[:4], want, atol=2e-3, rtol=2e-3)
    with pytest.raises(ValueError, match="batch x q_tokens = 8"):
        kvflash.attention(q[:4], k, v, lens, k_type="q8_0", v_type="q8_0", q_offsets=offsets,
                          max_q_tokens=4)


def test_the_torch_op_on_the_device():
    import kvflash.ops  # noqa: F401
    k, v = (x.cuda() for x in caches("q8_0"))
    q = torch.randn(2, 1, 8, 128, device="cuda")
    lens = torch.tensor([256, 100], device="cuda")
    want = kvflash.attention(q, k, v, lens, k_type="q8_0", v_type="q8_0")
    got = torch.ops.kvflash.attention(q, k, v, lens, k_type="q8_0", v_type="q8_0")
    torch.cuda.synchronize()
    assert torch.equal(got, want)
